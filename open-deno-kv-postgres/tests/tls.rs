//! TLS to PostgreSQL with libpq's meanings of sslmode, sslrootcert, sslcert and sslkey, against
//! a throwaway cluster with `ssl = on` (a server certificate signed by a test CA made here with
//! rcgen) and one without TLS. Each store's own sessions are looked up in `pg_stat_ssl`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use open_deno_kv_engine_kit::{Backend, KvError};
use open_deno_kv_postgres::testing::{ClusterOptions, STORE_ROLE, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

mod common;
use common::{get, postgres_error, set};

/// A test CA.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
struct Pair {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate (not a CA: rustls refuses a CA certificate as a server's) for the
    /// subject alternative names `names`, whose common name is `common_name` (PostgreSQL's
    /// `cert` authentication compares it with the user's name).
    fn leaf(&self, common_name: &str, names: &[&str]) -> Pair {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.is_ca = IsCa::ExplicitNoCa;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// Writes `text` to `dir/name`, returning the path as a URL parameter value.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The client side: the CA files and a client certificate, in a directory of the test's own.
struct Client {
    _dir: tempfile::TempDir,
    ca: String,
    other_ca: String,
    client_cert: String,
    client_key: String,
    stranger_cert: String,
    stranger_key: String,
}

/// A cluster with TLS on: its certificate is for `localhost` and `127.0.0.1`, signed by the
/// test CA; client certificates signed by the same CA are accepted (`ssl_ca_file`).
fn tls_cluster() -> Option<(TestCluster, Client)> {
    let cluster = TestCluster::start_or_skip(ClusterOptions::default())?;
    let ca = Ca::new("open-deno-kv test CA");
    let other = Ca::new("another CA");
    let server = ca.leaf("localhost", &["localhost", "127.0.0.1"]);
    cluster
        .enable_tls(&server.cert, &server.key, Some(&ca.pem()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = ca.leaf(STORE_ROLE, &[]);
    let stranger = other.leaf(STORE_ROLE, &[]);
    let files = Client {
        ca: file(dir.path(), "ca.crt", &ca.pem()),
        other_ca: file(dir.path(), "other-ca.crt", &other.pem()),
        client_cert: file(dir.path(), "client.crt", &client.cert),
        client_key: file(dir.path(), "client.key", &client.key),
        stranger_cert: file(dir.path(), "stranger.crt", &stranger.cert),
        stranger_key: file(dir.path(), "stranger.key", &stranger.key),
        _dir: dir,
    };
    Some((cluster, files))
}

/// Opens a store at `url` + `params` (as the store's role) under an application name of its
/// own, writes and reads through it (the committer's and a pooled connection), and answers
/// whether every session of it is encrypted according to `pg_stat_ssl`: `"true"` or `"false"`
/// (all alike), or the refusal.
async fn encrypted(
    cluster: &TestCluster,
    host: &str,
    params: &str,
    case: &str,
) -> Result<String, KvError> {
    let url = format!(
        "postgres://{STORE_ROLE}@{host}:{}/postgres?schema={case}&application_name={case}&{params}",
        cluster.port()
    );
    let kv = PostgresBackend::open_with(&url, PostgresOptions::default()).await?;
    set(&kv, "k", 1).await;
    assert!(get(&kv, "k").await.is_some());
    let ssl = cluster
        .psql(
            "postgres",
            &format!(
                "SELECT string_agg(DISTINCT s.ssl::text, ',') FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = '{case}'"
            ),
        )
        .unwrap();
    kv.close().await.unwrap();
    Ok(ssl)
}

/// The refusal of an answer, if it is one.
fn refusal(answer: &Result<String, KvError>) -> Option<&PostgresError> {
    answer.as_ref().err().and_then(postgres_error)
}

fn describe(answer: &Result<String, KvError>) -> String {
    match answer {
        Ok(ssl) => format!("connected, ssl={ssl}"),
        Err(err) => format!("refused: {err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_against_a_server_with_tls() {
    let Some((cluster, files)) = tls_cluster() else {
        return;
    };
    let ca = &files.ca;
    let cases = [
        (
            "disable",
            "127.0.0.1",
            "sslmode=disable".to_owned(),
            "false",
        ),
        // libpq's default: TLS when the server offers it.
        ("default", "127.0.0.1", String::new(), "true"),
        ("prefer", "127.0.0.1", "sslmode=prefer".to_owned(), "true"),
        ("require", "127.0.0.1", "sslmode=require".to_owned(), "true"),
        (
            "require_ca",
            "127.0.0.1",
            format!("sslmode=require&sslrootcert={ca}"),
            "true",
        ),
        (
            "verify_ca",
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            "true",
        ),
        (
            "full_ip",
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            "true",
        ),
        (
            "full_name",
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            "true",
        ),
    ];
    for (case, host, params, expected) in cases {
        let answer = encrypted(&cluster, host, &params, case).await;
        assert_eq!(
            answer.as_deref().ok(),
            Some(expected),
            "{case} ({params}): {}",
            describe(&answer)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_unless_the_mode_only_prefers_tls() {
    let Some((cluster, files)) = tls_cluster() else {
        return;
    };
    let other = &files.other_ca;
    // require with a root certificate checks it as verify-ca does (libpq).
    for (case, mode) in [
        ("w_require", "require"),
        ("w_verify_ca", "verify-ca"),
        ("w_verify_full", "verify-full"),
    ] {
        let answer = encrypted(
            &cluster,
            "127.0.0.1",
            &format!("sslmode={mode}&sslrootcert={other}"),
            case,
        )
        .await;
        assert!(
            matches!(refusal(&answer), Some(PostgresError::TlsUntrusted { .. })),
            "{case}: {}",
            describe(&answer)
        );
        let message = describe(&answer);
        assert!(message.contains("sslrootcert="), "{message}");
    }
    // The system's roots (Debian's ca-certificates) do not hold the test CA: sslrootcert=system
    // alone means verify-full against them, and a weaker mode beside it is refused unconnected.
    let answer = encrypted(&cluster, "localhost", "sslrootcert=system", "w_system").await;
    assert!(
        matches!(refusal(&answer), Some(PostgresError::TlsUntrusted { .. })),
        "{}",
        describe(&answer)
    );
    let answer = encrypted(
        &cluster,
        "localhost",
        "sslrootcert=system&sslmode=require",
        "w_system_weak",
    )
    .await;
    assert!(
        matches!(refusal(&answer), Some(PostgresError::InvalidParameter { parameter, .. }) if parameter == "sslmode"),
        "{}",
        describe(&answer)
    );
    // prefer falls back to plaintext when the handshake fails, as libpq does.
    let answer = encrypted(
        &cluster,
        "127.0.0.1",
        &format!("sslmode=prefer&sslrootcert={other}"),
        "w_prefer",
    )
    .await;
    assert_eq!(
        answer.as_deref().ok(),
        Some("false"),
        "{}",
        describe(&answer)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_the_certificate_does_not_list_is_refused_by_verify_full_only() {
    let Some((cluster, files)) = tls_cluster() else {
        return;
    };
    let ca = &files.ca;
    // The server is reached at 127.0.0.1 (hostaddr) under a name its certificate lacks.
    let answer = encrypted(
        &cluster,
        "db.invalid",
        &format!("sslmode=verify-full&sslrootcert={ca}&hostaddr=127.0.0.1"),
        "h_full",
    )
    .await;
    assert!(
        matches!(refusal(&answer), Some(PostgresError::TlsWrongHost { host, .. }) if host == "db.invalid"),
        "{}",
        describe(&answer)
    );
    assert!(describe(&answer).contains("verify-ca"));
    let answer = encrypted(
        &cluster,
        "db.invalid",
        &format!("sslmode=verify-ca&sslrootcert={ca}&hostaddr=127.0.0.1"),
        "h_ca",
    )
    .await;
    assert_eq!(
        answer.as_deref().ok(),
        Some("true"),
        "{}",
        describe(&answer)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_against_a_server_without_tls() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = file(dir.path(), "ca.crt", &Ca::new("unused CA").pem());
    for (case, params) in [
        ("p_disable", "sslmode=disable"),
        ("p_prefer", "sslmode=prefer"),
    ] {
        let answer = encrypted(&cluster, "127.0.0.1", params, case).await;
        assert_eq!(
            answer.as_deref().ok(),
            Some("false"),
            "{case}: {}",
            describe(&answer)
        );
    }
    for (case, params) in [
        ("p_require", "sslmode=require".to_owned()),
        ("p_verify_ca", format!("sslmode=verify-ca&sslrootcert={ca}")),
        (
            "p_verify_full",
            format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
    ] {
        let answer = encrypted(&cluster, "127.0.0.1", &params, case).await;
        assert!(
            matches!(refusal(&answer), Some(PostgresError::TlsUnavailable { .. })),
            "{case}: {}",
            describe(&answer)
        );
        assert!(
            describe(&answer).contains("ssl = on"),
            "{}",
            describe(&answer)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_log_in_where_pg_hba_asks_for_one() {
    let Some((cluster, files)) = tls_cluster() else {
        return;
    };
    cluster
        .set_hba(&format!(
            "hostssl all {STORE_ROLE} 127.0.0.1/32 cert\n\
             host all {STORE_ROLE} 127.0.0.1/32 reject"
        ))
        .unwrap();
    let ca = &files.ca;
    let with = format!(
        "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
        files.client_cert, files.client_key
    );
    let answer = encrypted(&cluster, "localhost", &with, "c_with").await;
    assert_eq!(
        answer.as_deref().ok(),
        Some("true"),
        "{}",
        describe(&answer)
    );

    let without = format!("sslmode=verify-full&sslrootcert={ca}");
    let answer = encrypted(&cluster, "localhost", &without, "c_without").await;
    assert!(
        matches!(
            refusal(&answer),
            Some(PostgresError::ClientCertificateRefused { .. })
        ),
        "{}",
        describe(&answer)
    );
    assert!(
        describe(&answer).contains("sslcert="),
        "{}",
        describe(&answer)
    );

    let stranger = format!(
        "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
        files.stranger_cert, files.stranger_key
    );
    let answer = encrypted(&cluster, "localhost", &stranger, "c_stranger").await;
    assert!(
        matches!(
            refusal(&answer),
            Some(PostgresError::ClientCertificateRefused { .. })
        ),
        "{}",
        describe(&answer)
    );

    // Without TLS the reject line applies: pg_hba.conf's refusal, naming the encryption.
    let answer = encrypted(&cluster, "localhost", "sslmode=disable", "c_plain").await;
    assert!(
        matches!(refusal(&answer), Some(PostgresError::HbaRefused { message }) if message.contains("no encryption")),
        "{}",
        describe(&answer)
    );
}

/// Replica URLs carry TLS parameters of their own: eventual reads reach the replica encrypted,
/// and a replica URL whose CA does not match is refused at open rather than silently never used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_urls_take_the_same_tls_parameters() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        replica: true,
        ..ClusterOptions::default()
    }) else {
        return;
    };
    let ca = Ca::new("open-deno-kv test CA");
    let other = Ca::new("another CA");
    let server = ca.leaf("localhost", &["localhost", "127.0.0.1"]);
    cluster.enable_tls(&server.cert, &server.key, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = file(dir.path(), "ca.crt", &ca.pem());
    let other_file = file(dir.path(), "other.crt", &other.pem());
    let replica_port = cluster
        .replica_url()
        .unwrap()
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let tls =
        |ca: &str| format!("sslmode=verify-full&sslrootcert={ca}&application_name=replica_tls");
    let primary = format!(
        "postgres://postgres@localhost:{}/postgres?{}",
        cluster.port(),
        tls(&ca_file)
    );
    let replica = |ca: &str| {
        format!(
            "postgres://postgres@localhost:{replica_port}/postgres?{}",
            tls(ca)
        )
    };

    let options = PostgresOptions {
        replica_urls: vec![replica(&ca_file)],
        ..PostgresOptions::default()
    };
    let kv = PostgresBackend::open_with(&primary, options).await.unwrap();
    set(&kv, "r", 7).await;
    let read = open_deno_kv_engine_kit::SnapshotRead {
        ranges: vec![
            open_deno_kv_engine_kit::ReadRange::prefix(&open_deno_kv_engine_kit::key!["r"], 10)
                .unwrap(),
        ],
        consistency: open_deno_kv_engine_kit::Consistency::Eventual,
    };
    // Eventual reads go to the replica once it has replayed the write (read-your-writes); its
    // pooled connection stays open after the read.
    let mut on_replica = String::new();
    for _ in 0..50 {
        kv.snapshot_read(read.clone()).await.unwrap();
        on_replica = cluster
            .replica_psql(
                "postgres",
                "SELECT string_agg(DISTINCT s.ssl::text, ',') FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'replica_tls'",
            )
            .unwrap();
        if !on_replica.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        on_replica, "true",
        "the replica's sessions of the store are encrypted"
    );
    kv.close().await.unwrap();

    let options = PostgresOptions {
        replica_urls: vec![replica(&other_file)],
        ..PostgresOptions::default()
    };
    let err = PostgresBackend::open_with(&primary, options)
        .await
        .unwrap_err();
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::TlsUntrusted { .. })
        ),
        "{err:?}"
    );
}
