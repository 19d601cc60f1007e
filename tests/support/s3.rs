//! The S3-compatible test server that `scripts/test.sh` starts on loopback
//! (moto): where it is, and buckets on it.

use std::io::{Read, Write};
use std::time::Duration;

/// The server's endpoint from `TUNECTL_TEST_S3_ENDPOINT`; `None` (after
/// saying so) when it is missing outside CI. Missing in CI is a failure.
pub fn endpoint() -> Option<String> {
    match std::env::var("TUNECTL_TEST_S3_ENDPOINT") {
        Ok(v) if !v.trim().is_empty() => Some(v.trim().trim_end_matches('/').to_string()),
        _ => {
            let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
            assert!(
                !ci,
                "CI is set but TUNECTL_TEST_S3_ENDPOINT is not: the S3 ledger tests need the \
                 S3-compatible server that ./scripts/test.sh starts"
            );
            eprintln!(
                "skipped: TUNECTL_TEST_S3_ENDPOINT is not set; run ./scripts/test.sh to test \
                 the S3 ledger against a local moto server"
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
