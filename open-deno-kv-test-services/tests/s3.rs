//! The S3 test server starts on a free loopback port with its bucket, creates more buckets,
//! pauses and resumes, and is gone once dropped.

#![allow(clippy::unwrap_used)]

use std::net::TcpStream;

use open_deno_kv_test_services::{BUCKET, S3TestServer};

#[test]
fn it_starts_with_its_bucket_makes_more_and_stops_on_drop() {
    let Some(s3) = S3TestServer::start_or_skip() else {
        return;
    };
    assert_eq!(s3.bucket(), BUCKET);
    assert_eq!(s3.endpoint(), format!("http://127.0.0.1:{}", s3.port()));
    assert_eq!(s3.url("/db/"), format!("s3://{BUCKET}/db/"));
    let env = s3.env();
    assert!(
        env.contains(&("AWS_ENDPOINT_URL", s3.endpoint())),
        "{env:?}"
    );
    assert_eq!(
        s3.denokv_args("db/")[..4],
        ["--sync-from-s3", "--s3-bucket", BUCKET, "--s3-prefix"]
    );

    s3.create_bucket("another").unwrap();
    assert!(s3.log().contains("PUT /another"), "{}", s3.log());

    // Paused, it holds its port; resumed, it answers again.
    s3.pause().unwrap();
    s3.resume().unwrap();
    s3.create_bucket("after-pause").unwrap();

    let port = s3.port();
    drop(s3);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "moto still answers on {port} after the drop"
    );
}
