//! Probe for int8 CPU embeddings (issue 31): candle's quantized matmul (Q8_0, Q4_0, Q8K weights;
//! activations quantized per row) against its f32 matmul at MiniLM's matrix shapes, with the
//! relative error of each. `cargo run --release --example qmatmul_probe`.
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    for (m, k, n) in [(2048, 384, 1536), (2048, 1536, 384), (2048, 384, 384)] {
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
        let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?;
        let f = candle_nn::Linear::new(w.clone(), None);
        {
            // ri-batch's own int8 product (models::layers::int8), the same shapes.
            let wv = w.flatten_all()?.to_vec1::<f32>()?;
            let xv = x.flatten_all()?.to_vec1::<f32>()?;
            let q = ri_batch::models::layers::int8::Int8Matrix::quantize(&wv, n, k);
            let _ = q.matmul(&xv, m);
            let reps = 20;
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(q.matmul(&xv, m));
            }
            let tq = t.elapsed().as_secs_f64() / reps as f64;
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(f.forward(&x)?);
            }
            let tf = t.elapsed().as_secs_f64() / reps as f64;
            let gf = 2.0 * (m * k * n) as f64 / 1e9;
            println!(
                "{m}x{k}x{n} ri-batch int8: f32 {:.1} GFLOP/s, int8 {:.1} GOP/s, ratio {:.2}",
                gf / tf,
                gf / tq,
                tf / tq
            );
        }
        for dt in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q8K] {
            let q = match QTensor::quantize(&w, dt) {
                Ok(q) => QMatMul::from_qtensor(q)?,
                Err(e) => {
                    println!("{m}x{k}x{n} {dt:?}: not possible ({e})");
                    continue;
                }
            };
            let _ = f.forward(&x)?;
            let _ = q.forward(&x)?;
            let reps = 20;
            let t = Instant::now();
            for _ in 0..reps {
                let _ = f.forward(&x)?;
            }
            let tf = t.elapsed().as_secs_f64() / reps as f64;
            let t = Instant::now();
            for _ in 0..reps {
                let _ = q.forward(&x)?;
            }
            let tq = t.elapsed().as_secs_f64() / reps as f64;
            let a = f.forward(&x)?;
            let b = q.forward(&x)?;
            let err = (a.sub(&b)?.sqr()?.mean_all()?.to_scalar::<f32>()?
                / a.sqr()?.mean_all()?.to_scalar::<f32>()?)
            .sqrt();
            let gf = 2.0 * (m * k * n) as f64 / 1e9;
            println!("{m}x{k}x{n} {dt:?}: f32 {:.1} GFLOP/s, quant {:.1} GFLOP/s, ratio {:.2}, rel err {err:.4}", gf / tf, gf / tq, tf / tq);
        }
    }
    Ok(())
}
