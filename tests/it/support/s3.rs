//! The S3-compatible test server that `scripts/test.sh` starts on loopback
//! (moto): where it is, and buckets on it.

use std::io::{Read, Write};
use std::time::Duration;

/// The server's endpoint from `TUNECTL_TEST_S3_ENDPOINT`. Missing, the S3
/// tests fail (a test that passes without testing anything hides a broken
/// set-up), unless `TUNECTL_TEST_SKIP_S3=1` asks to skip them: then `None`,
/// after saying so.
pub fn endpoint() -> Option<String> {
    match std::env::var("TUNECTL_TEST_S3_ENDPOINT") {
        Ok(v) if !v.trim().is_empty() => Some(v.trim().trim_end_matches('/').to_string()),
        _ => {
            let skip = std::env::var("TUNECTL_TEST_SKIP_S3").is_ok_and(|v| v == "1");
            assert!(
                skip,
                "TUNECTL_TEST_S3_ENDPOINT is not set: the S3 ledger tests need the \
                 S3-compatible server that ./scripts/test.sh starts (run the tests with it), \
                 or set TUNECTL_TEST_SKIP_S3=1 to skip them"
            );
            eprintln!(
                "SKIPPED (TUNECTL_TEST_SKIP_S3=1): this S3 ledger test did not run; \
                 ./scripts/test.sh runs it against a local moto server"
            );
            None
        }
    }
}

/// `http://host:port` → (host, port).
fn host_port(endpoint: &str) -> (String, u16) {
    let u = url::Url::parse(endpoint).expect("endpoint URL");
    (
        u.host_str().expect("endpoint host").to_string(),
        u.port_or_known_default().expect("endpoint port"),
    )
}

/// Create a bucket with a plain HTTP PUT (the server accepts any
/// credentials).
pub fn create_bucket(endpoint: &str, bucket: &str) {
    let (host, port) = host_port(endpoint);
    let mut s = std::net::TcpStream::connect((host.as_str(), port))
        .unwrap_or_else(|e| panic!("cannot reach the S3 test server at {endpoint}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send PUT");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or("");
    assert!(
        status.contains(" 200"),
        "creating bucket {bucket} at {endpoint}: {status}"
    );
}
