//! The environment a real process sees: `$PINCER_CONFIG` picks the file and
//! `OPENCLAW_GATEWAY_*` override it. One test, because the process
//! environment is shared by every test in a binary.

use pincer::config::{apply_env_overrides, load, write_atomic, Config, ConfigError};

#[test]
fn pincer_config_env_and_gateway_overrides_apply_on_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("from-env.json5");
    write_atomic(
        &path,
        "{ gateway: { port: 18800, auth: { password: 'file-pw' } } }",
    )
    .expect("write");

    std::env::set_var("PINCER_CONFIG", &path);
    std::env::set_var("OPENCLAW_GATEWAY_PORT", "127.0.0.1:19005");
    std::env::set_var("OPENCLAW_GATEWAY_TOKEN", "env-token");
    std::env::set_var("OPENCLAW_GATEWAY_PASSWORD", "env-pw");

    let loaded = load(None).expect("config named by PINCER_CONFIG");
    assert_eq!(loaded.path.as_deref(), Some(path.as_path()));
    assert_eq!(
        loaded.config.gateway.port, 19005,
        "env port wins over the file"
    );
    assert_eq!(
        loaded.config.gateway.auth.token.as_deref(),
        Some("env-token")
    );
    assert_eq!(
        loaded.config.gateway.auth.password.as_deref(),
        Some("file-pw"),
        "a password in the file wins over the env"
    );

    let mut config = Config::default();
    apply_env_overrides(&mut config).expect("overrides");
    assert_eq!(config.gateway.auth.password.as_deref(), Some("env-pw"));

    std::env::set_var("OPENCLAW_GATEWAY_PORT", "not-a-port");
    let err = load(None).expect_err("bad port env");
    assert!(
        matches!(&err, ConfigError::Env { var, .. } if var == "OPENCLAW_GATEWAY_PORT"),
        "{err}"
    );

    std::env::remove_var("OPENCLAW_GATEWAY_PORT");
    std::env::set_var("PINCER_CONFIG", dir.path().join("missing.json5"));
    let err = load(None).expect_err("missing PINCER_CONFIG file");
    assert!(err.to_string().contains("$PINCER_CONFIG"), "{err}");
}
