//! The schema name of every JSON document tunectl prints
//! (`--format json`), `tunectl.<document>/<version>`. The version goes up
//! when a field is removed, renamed or changes its type or meaning; added
//! fields keep it. docs/json.md documents each, and a test keeps the two in
//! step.

pub const PLAN: &str = "tunectl.plan/1";
pub const LAUNCH: &str = "tunectl.launch/1";
pub const STATUS: &str = "tunectl.status/1";
pub const LOGS: &str = "tunectl.logs/1";
pub const REPORT: &str = "tunectl.report/2";
pub const EXPORT: &str = "tunectl.export/1";
pub const LEDGER_CHECK: &str = "tunectl.ledger-check/1";
pub const FINGERPRINT: &str = "tunectl.fingerprint/1";
pub const FINGERPRINT_INVENTORY: &str = "tunectl.fingerprint-inventory/1";
pub const VALIDATE: &str = "tunectl.validate/1";
/// The `tunectl.data` key-value metadata of a Parquet file that
/// `export --format parquet` writes (its columns are in docs/ledger.md).
pub const DATA: &str = "tunectl.data/1";

/// All of them, for the test that docs/json.md documents each.
pub const ALL: [&str; 11] = [
    PLAN,
    LAUNCH,
    STATUS,
    REPORT,
    EXPORT,
    LEDGER_CHECK,
    FINGERPRINT,
    FINGERPRINT_INVENTORY,
    VALIDATE,
    LOGS,
    DATA,
];
