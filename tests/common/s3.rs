//! A real S3 API server for tests and benchmarks: moto's standalone server (PyPI `moto[server]`,
//! installed by scripts/test) on a free loopback port, with one bucket made; stopped when dropped.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct S3Server {
    child: Child,
    pub endpoint: String,
    python: String,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl S3Server {
    /// Starts the server with `python` (which must have moto and boto3) and makes `bucket`.
    pub fn start(python: &str, bucket: &str) -> S3Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test Python runs moto's server (requirements-test.txt: moto[server])");
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            python: python.to_string(),
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "moto's S3 server did not start on port {port} (is moto[server] installed? scripts/test installs it)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let made = server.clients(&["bucket", bucket]);
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        server
    }

    /// Runs tests/s3_clients.py `command` against this server with `args`.
    pub fn clients(&self, args: &[&str]) -> Output {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3_clients.py");
        Command::new(&self.python)
            .arg(script)
            .arg(args[0])
            .arg(&self.endpoint)
            .args(&args[1..])
            .output()
            .unwrap()
    }

    /// The AWS environment that points a client at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }
}
