//! Bounds on what one `sql` statement may cost: memory (DataFusion's memory pool), wall time,
//! set operations, the size of what one call of a generating function (`repeat`, `lpad`,
//! `array_repeat`, `range`, …) may build, and a stack deep enough for the plans it admits; a
//! failure inside the engine is an error naming the statement, never a crash.

use crate::error::{because, Error, Result};
use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{exec_err, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;
use std::sync::Arc;
use std::time::Duration;

/// What one statement may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes DataFusion's memory pool grants the statement's operators (sorts, joins,
    /// aggregations, recursive queries).
    pub memory_bytes: usize,
    /// Wall time before the statement is stopped.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 2 << 30,
            timeout: Duration::from_secs(300),
        }
    }
}

/// The most `UNION`, `EXCEPT` and `INTERSECT` operators one statement may hold: each nests the
/// plan one level deeper.
pub const MAX_SET_OPERATIONS: usize = 512;

/// The most bytes one call of a generating function may build over its batch (a list element
/// counted as 8): past it the statement fails instead of the process aborting on allocation.
pub const MAX_GENERATED: i64 = 1 << 28;

/// The stack of the thread that plans and runs a statement: plans are walked recursively.
const STACK_BYTES: usize = 1 << 30;

/// Refuses a statement with more than [`MAX_SET_OPERATIONS`] set operators, counted on its
/// tokens before it is parsed.
pub fn check_set_operations(query: &str) -> Result<()> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&GenericDialect {}, query)
        .tokenize()
        .map_err(Error::sql)?;
    let n = tokens
        .iter()
        .filter(|t| {
            matches!(t, Token::Word(w) if matches!(w.keyword, Keyword::UNION | Keyword::EXCEPT | Keyword::INTERSECT))
        })
        .count();
    if n > MAX_SET_OPERATIONS {
        return Err(Error::sql(format!(
            "the statement has {n} set operations (UNION, EXCEPT, INTERSECT); at most {MAX_SET_OPERATIONS} are planned"
        )));
    }
    Ok(())
}

/// Runs `f` on a thread of its own with a deep stack and waits at most `timeout` for it: a
/// panic inside the engine becomes an error, and so does a statement still running at the
/// limit (its thread is left to end with the process: a statement that never yields, such as an
/// unbounded recursive query, cannot be stopped from outside).
pub fn guarded<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("sql".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| Error::sql(because("cannot start the query thread", e)))?;
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Error::sql(format!(
            "the statement ran past its time limit of {} s (--timeout) and was stopped",
            timeout.as_secs_f64()
        ))),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let why = match handle.join() {
                Err(panic) => crate::error::panic_message(panic.as_ref()),
                Ok(()) => "no result".into(),
            };
            Err(Error::sql(format!(
                "the query engine failed on this statement ({why}); nothing was written"
            )))
        }
    }
}

/// How a generating function's output grows with its arguments.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Growth {
    /// `repeat(s, n)`: bytes of `s` times `n`.
    Repeat,
    /// The argument at this index is the output's length (`lpad`, `array_repeat`, …).
    Length(usize),
    /// `range` / `generate_series` over integers: `(stop - start) / step` elements.
    Range,
}

/// A generating function that first bounds what its call will build.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
}

/// The values of integer argument `i` (`None` where null or not an integer).
fn ints(args: &ScalarFunctionArgs, i: usize) -> Option<Vec<Option<i64>>> {
    let a = to_array(args, i)?;
    let a = arrow::compute::cast(&a, &DataType::Int64).ok()?;
    Some(a.as_primitive::<Int64Type>().iter().collect())
}

fn to_array(args: &ScalarFunctionArgs, i: usize) -> Option<ArrayRef> {
    args.args.get(i)?.to_array(args.number_rows.max(1)).ok()
}

impl Bounded {
    /// What this call would build, summed over its rows (bytes or elements).
    fn size(&self, args: &ScalarFunctionArgs) -> i64 {
        let n = args.number_rows.max(1);
        let at = |v: &Option<Vec<Option<i64>>>, r: usize| {
            v.as_ref().and_then(|v| v.get(r).copied().flatten())
        };
        match self.growth {
            Growth::Length(i) => {
                let len = ints(args, i);
                let unit = if matches!(
                    args.return_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) {
                    1
                } else {
                    8
                };
                (0..n)
                    .map(|r| at(&len, r).unwrap_or(0).max(0).saturating_mul(unit))
                    .fold(0i64, i64::saturating_add)
            }
            Growth::Repeat => {
                let count = ints(args, 1);
                let bytes = to_array(args, 0)
                    .and_then(|a| arrow::compute::kernels::length::length(&a).ok())
                    .and_then(|l| arrow::compute::cast(&l, &DataType::Int64).ok());
                let bytes: Vec<Option<i64>> = bytes
                    .map(|b| b.as_primitive::<Int64Type>().iter().collect())
                    .unwrap_or_default();
                (0..n)
                    .map(|r| {
                        let b = bytes.get(r).copied().flatten().unwrap_or(0).max(1);
                        b.saturating_mul(at(&count, r).unwrap_or(0).max(0))
                    })
                    .fold(0i64, i64::saturating_add)
            }
            Growth::Range => {
                // Dates and timestamps step by intervals: only integer ranges are bounded.
                if !args.args.iter().all(|a| a.data_type().is_integer()) {
                    return 0;
                }
                let k = args.args.len();
                let (start, stop, step) = match k {
                    1 => (None, ints(args, 0), None),
                    2 => (ints(args, 0), ints(args, 1), None),
                    _ => (ints(args, 0), ints(args, 1), ints(args, 2)),
                };
                (0..n)
                    .map(|r| {
                        let (a, b) = (at(&start, r).unwrap_or(0), at(&stop, r).unwrap_or(0));
                        let s = at(&step, r).unwrap_or(1).unsigned_abs().max(1);
                        ((b.abs_diff(a) / s).min(i64::MAX as u64 / 8) as i64) * 8
                    })
                    .fold(0i64, i64::saturating_add)
            }
        }
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let size = self.size(&args);
        if size > MAX_GENERATED {
            return exec_err!(
                "{}: this call would build about {size} bytes; `sql` allows {MAX_GENERATED} per call",
                self.inner.name()
            );
        }
        self.inner.invoke_with_args(args)
    }
}

/// Replaces the generating functions of `ctx` with bounded ones.
pub fn bound_functions(ctx: &SessionContext) {
    let state = ctx.state();
    let functions = state.scalar_functions();
    for (name, growth) in [
        ("repeat", Growth::Repeat),
        ("lpad", Growth::Length(1)),
        ("rpad", Growth::Length(1)),
        ("array_repeat", Growth::Length(1)),
        ("array_resize", Growth::Length(1)),
        ("range", Growth::Range),
        ("generate_series", Growth::Range),
    ] {
        if let Some(inner) = functions.get(name) {
            let f = Bounded {
                inner: inner.clone(),
                growth,
            };
            ctx.register_udf(ScalarUDF::new_from_impl(f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_are_counted_on_tokens() {
        let many = vec!["SELECT 1"; MAX_SET_OPERATIONS + 2].join(" UNION ALL ");
        assert!(check_set_operations(&many).is_err());
        assert!(check_set_operations("SELECT 'union' UNION SELECT 2").is_ok());
    }

    #[test]
    fn a_panic_or_a_statement_past_its_time_is_an_error() {
        let long = Duration::from_secs(60);
        let e = guarded::<()>(long, || panic!("boom")).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
        assert_eq!(guarded(long, || Ok(7)).unwrap(), 7);
        let slow = guarded(Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(5));
            Ok(())
        });
        assert!(slow.unwrap_err().to_string().contains("time limit"));
    }
}
