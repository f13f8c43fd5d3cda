//! Every SQL statement of the engine, written once, for the store's PostgreSQL schema.
//!
//! A store lives in one PostgreSQL schema (`public` unless the options name another), so several
//! stores can share a database. The schema name is checked to be a plain lowercase identifier
//! before it is put into statement text.

use crate::PostgresError;

/// The statements of one store, with its schema name filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    /// The schema, as given.
    pub(crate) schema: String,
    /// The NOTIFY channel commits announce themselves on (one per store).
    pub(crate) channel: String,

    /// `$1` = how many versions to take; returns the last one and the change log's retention
    /// (ms, NULL when off). Taken FIRST in every write transaction: the row lock orders writers,
    /// so versions follow commit order, and the retention read under it is the one every
    /// `configure_change_log` that committed before has set. The same statement writes the
    /// group's commit record: the version it took, and the random id `$2` (see the `outcome`
    /// module), so the record costs no statement of its own.
    pub(crate) bump_version: String,
    /// [`Sql::bump_version`] for a group staged against what this committer foresaw
    /// (the `group` module, "One flight"): the same, and it fails with
    /// `division_by_zero` (aborting the transaction, so its `COMMIT` rolls back) unless
    /// `data_version` is `$3` and `change_log_ms` is `$4`. Nothing is returned: the caller
    /// already knows both.
    pub(crate) bump_foreseen: String,
    /// Sets the last commit version to `$1` (a logged group whose last writes failed gives their
    /// versions back, so the next commit follows the last one logged).
    pub(crate) set_version: String,
    /// The last version committed (as far as this server has it: a replica may lag).
    pub(crate) read_version: String,
    /// Entries of the keys in `$1` (expired or not).
    pub(crate) read_keys: String,
    /// One key `$1`, unless expired at `$2`.
    pub(crate) read_point: String,
    /// `[$1, $2)`, not expired at `$3`, at most `$4`, ascending.
    pub(crate) read_range: String,
    /// The same, descending.
    pub(crate) read_range_reverse: String,
    /// Stores entries given as five parallel arrays (keys are distinct).
    pub(crate) upsert: String,
    /// Deletes the keys in `$1`.
    pub(crate) delete: String,
    /// Every entry in `[$1, $2)`, in one statement (a range delete).
    pub(crate) delete_range: String,
    /// The visible entries in `[$1, $2)` at `$3`: how many, and their key and value bytes.
    pub(crate) count_range: String,
    /// Deletes up to 1000 entries expired at `$1`.
    pub(crate) sweep_expired: String,
    /// `pg_notify($1, $2)`.
    pub(crate) notify: String,

    /// Stores a new message.
    pub(crate) enqueue: String,
    /// Takes the first `$4` messages due at `$1` (in due order, skipping rows other consumers
    /// are taking), leasing them as `$2` until `$3`; returns id, payload and ready time.
    pub(crate) take_due: String,
    /// Leased messages whose lease ended at `$1`, except those in `$2` (held in this process).
    pub(crate) expired_leases: String,
    /// The next ready time of a waiting message, and the next lease end (except `$1`).
    pub(crate) next_due: String,
    /// The message `$1` under lease `$2`.
    pub(crate) leased_message: String,
    /// Deletes the messages of the leases `($1[i], $2[i])` still held (successes, in batches).
    pub(crate) delete_leased_many: String,
    /// Puts message `$1` under lease `$2` back, due at `$3` with schedule `$4`; notifies `$5`/`$6`.
    pub(crate) retry_leased: String,
    /// Puts the messages of the leases `($1[i], $2[i])` back untouched, each due at `$3` at the
    /// latest; notifies `$4`/`$5` once if any was still held.
    pub(crate) release_leased: String,
    /// Deletes the messages of the leases `($1[i], $2[i])` still held, returning their ids.
    pub(crate) claim_leased: String,
    /// Moves the lease ends of `($1[i], $2[i])` to `$3`.
    pub(crate) renew_leases: String,
    /// Every message, in due order.
    pub(crate) all_messages: String,
    /// How many messages there are, waiting or leased (`kv_queue_depth`).
    pub(crate) queue_depth: String,
    /// Every entry, expired or not, in key order (the integrity check).
    pub(crate) all_entries: String,

    /// Up to `$3` entries after key `$1`, not expired at `$2`, in key order (an export's page).
    pub(crate) export_entries: String,
    /// Up to `$3` messages after (ready time `$1`, id `$2`) in (ready time, id) order, a leased
    /// message counting as ready at `$4` at the latest (an export's page).
    pub(crate) export_messages: String,
    /// Locks the `kv_meta` row, as every writer does first (an import): the last version and the
    /// change log's retention.
    pub(crate) lock_version: String,
    /// Whether the store holds any entry or message.
    pub(crate) any_data: String,

    /// Locks the `kv_meta` row in share mode: waits until the transaction holding it (a group
    /// whose connection was lost) has ended, committed or rolled back.
    pub(crate) wait_for_writer: String,
    /// Whether the group record (`$1`, `$2`) exists.
    pub(crate) commit_lookup: String,
    /// Deletes the group records of versions up to `$1`.
    pub(crate) commit_prune: String,

    /// Stores change records given as parallel arrays: versionstamps, times (ms), record bytes.
    pub(crate) log_insert: String,
    /// Deletes the oldest records older than `$1` (ms): of the `$2` oldest, those before the first
    /// that is not older (pruning).
    pub(crate) log_prune: String,
    /// Sets the retention to `$1` (ms, or NULL: off), under the `kv_meta` row lock.
    pub(crate) log_configure: String,
    /// Deletes every record (the log switched off).
    pub(crate) log_clear: String,
    /// Up to `$2` records after versionstamp `$1`, in order: versionstamp and bytes.
    pub(crate) log_read: String,
    /// The retention, the number of records, the first and the last record, in one statement.
    pub(crate) log_status: String,
    /// Every record, in order: versionstamp and bytes (the integrity check).
    pub(crate) log_all: String,
}

/// The longest schema name accepted (the NOTIFY channel adds a prefix, within PostgreSQL's 63).
const MAX_SCHEMA_LEN: usize = 40;

/// Whether `name` is a plain lowercase identifier that needs no quoting.
fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    starts_well
        && name.len() <= MAX_SCHEMA_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The entry columns, in the order [`crate::codec`] reads them.
const ENTRY: &str = "k, v, v_encoding, vs, expires_at";
/// The message columns, in the order [`crate::codec`] reads them.
const MESSAGE: &str = "id, ready_at, payload, keys_if_undelivered, backoff_ms, lease, deadline";

impl Sql {
    /// The statements for the store in `schema`.
    pub(crate) fn new(schema: &str) -> Result<Self, PostgresError> {
        if !valid_schema_name(schema) {
            return Err(PostgresError::InvalidSchemaName {
                name: schema.to_owned(),
            });
        }
        let kv = format!("\"{schema}\".kv");
        let meta = format!("\"{schema}\".kv_meta");
        let queue = format!("\"{schema}\".kv_queue");
        let log = format!("\"{schema}\".kv_change_log");
        let ids = format!("\"{schema}\".kv_commit_ids");
        let visible = "(expires_at IS NULL OR expires_at >";
        Ok(Sql {
            schema: schema.to_owned(),
            channel: format!("kv_changes_{schema}"),
            bump_version: format!(
                "WITH bumped AS (UPDATE {meta} SET data_version = data_version + $1 \
                 RETURNING data_version, change_log_ms), \
                 recorded AS (INSERT INTO {ids} (version, id) SELECT data_version, $2::uuid FROM bumped) \
                 SELECT data_version, change_log_ms FROM bumped"
            ),
            bump_foreseen: format!(
                "WITH bumped AS (UPDATE {meta} SET data_version = data_version + $1::int8 / \
                 (CASE WHEN data_version = $3::int8 AND change_log_ms IS NOT DISTINCT FROM $4::int8 \
                 THEN 1 ELSE 0 END) RETURNING data_version) \
                 INSERT INTO {ids} (version, id) SELECT data_version, $2::uuid FROM bumped"
            ),
            set_version: format!("UPDATE {meta} SET data_version = $1"),
            read_version: format!("SELECT data_version FROM {meta}"),
            read_keys: format!("SELECT {ENTRY} FROM {kv} WHERE k = ANY($1)"),
            read_point: format!("SELECT {ENTRY} FROM {kv} WHERE k = $1 AND {visible} $2)"),
            read_range: format!(
                "SELECT {ENTRY} FROM {kv} WHERE k >= $1 AND k < $2 AND {visible} $3) \
                 ORDER BY k LIMIT $4"
            ),
            read_range_reverse: format!(
                "SELECT {ENTRY} FROM {kv} WHERE k >= $1 AND k < $2 AND {visible} $3) \
                 ORDER BY k DESC LIMIT $4"
            ),
            upsert: format!(
                "INSERT INTO {kv} ({ENTRY}) \
                 SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int2[], $4::bytea[], $5::int8[]) \
                 ON CONFLICT (k) DO UPDATE SET v = excluded.v, v_encoding = excluded.v_encoding, \
                 vs = excluded.vs, expires_at = excluded.expires_at"
            ),
            delete: format!("DELETE FROM {kv} WHERE k = ANY($1)"),
            delete_range: format!("DELETE FROM {kv} WHERE k >= $1 AND k < $2"),
            count_range: format!(
                "SELECT count(*), coalesce(sum(octet_length(k)), 0)::int8, \
                 coalesce(sum(octet_length(v)), 0)::int8 \
                 FROM {kv} WHERE k >= $1 AND k < $2 AND {visible} $3)"
            ),
            sweep_expired: format!(
                "DELETE FROM {kv} WHERE k IN (SELECT k FROM {kv} WHERE expires_at <= $1 \
                 ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED) AND expires_at <= $1"
            ),
            notify: "SELECT pg_notify($1, $2)".to_owned(),
            enqueue: format!(
                "INSERT INTO {queue} (id, ready_at, payload, keys_if_undelivered, backoff_ms) \
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            take_due: format!(
                "WITH next AS (SELECT id FROM {queue} WHERE lease IS NULL AND ready_at <= $1 \
                 ORDER BY ready_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) \
                 UPDATE {queue} q SET lease = $2, deadline = $3 FROM next WHERE q.id = next.id \
                 RETURNING q.id, q.payload, q.ready_at"
            ),
            expired_leases: format!(
                "SELECT {MESSAGE} FROM {queue} WHERE lease IS NOT NULL AND deadline <= $1 \
                 AND id <> ALL($2) ORDER BY deadline LIMIT 100"
            ),
            next_due: format!(
                "SELECT (SELECT min(ready_at) FROM {queue} WHERE lease IS NULL), \
                 (SELECT min(deadline) FROM {queue} WHERE lease IS NOT NULL AND id <> ALL($1))"
            ),
            leased_message: format!("SELECT {MESSAGE} FROM {queue} WHERE id = $1 AND lease = $2"),
            delete_leased_many: format!(
                "DELETE FROM {queue} q USING unnest($1::uuid[], $2::uuid[]) AS c(id, lease) \
                 WHERE q.id = c.id AND q.lease = c.lease"
            ),
            retry_leased: format!(
                "WITH moved AS (UPDATE {queue} SET ready_at = $3, backoff_ms = $4, lease = NULL, \
                 deadline = NULL WHERE id = $1 AND lease = $2 RETURNING id) \
                 SELECT pg_notify($5, $6) FROM moved"
            ),
            release_leased: format!(
                "WITH moved AS (UPDATE {queue} q SET ready_at = LEAST(q.ready_at, $3), lease = NULL, \
                 deadline = NULL FROM unnest($1::uuid[], $2::uuid[]) AS c(id, lease) \
                 WHERE q.id = c.id AND q.lease = c.lease RETURNING q.id) \
                 SELECT pg_notify($4, $5) WHERE EXISTS (SELECT 1 FROM moved)"
            ),
            claim_leased: format!(
                "DELETE FROM {queue} q USING unnest($1::uuid[], $2::uuid[]) AS c(id, lease) \
                 WHERE q.id = c.id AND q.lease = c.lease RETURNING q.id"
            ),
            renew_leases: format!(
                "UPDATE {queue} q SET deadline = $3 FROM unnest($1::uuid[], $2::uuid[]) \
                 AS c(id, lease) WHERE q.id = c.id AND q.lease = c.lease"
            ),
            all_messages: format!("SELECT {MESSAGE} FROM {queue} ORDER BY ready_at, id"),
            queue_depth: format!("SELECT count(*) FROM {queue}"),
            all_entries: format!("SELECT {ENTRY} FROM {kv} ORDER BY k"),
            export_entries: format!(
                "SELECT {ENTRY} FROM {kv} WHERE k > $1 AND {visible} $2) ORDER BY k LIMIT $3"
            ),
            export_messages: format!(
                "SELECT {MESSAGE} FROM {queue} WHERE ({due}, id) > ($1, $2) \
                 ORDER BY {due}, id LIMIT $3",
                due = "(CASE WHEN lease IS NULL THEN ready_at ELSE LEAST(ready_at, $4) END)"
            ),
            lock_version: format!("SELECT data_version, change_log_ms FROM {meta} FOR UPDATE"),
            any_data: format!(
                "SELECT EXISTS (SELECT 1 FROM {kv}) OR EXISTS (SELECT 1 FROM {queue})"
            ),
            wait_for_writer: format!("SELECT data_version FROM {meta} FOR SHARE"),
            commit_lookup: format!(
                "SELECT EXISTS (SELECT 1 FROM {ids} WHERE version = $1 AND id = $2)"
            ),
            commit_prune: format!("DELETE FROM {ids} WHERE version <= $1"),
            log_insert: format!(
                "INSERT INTO {log} (vs, at, record) \
                 SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[])"
            ),
            // Deletes a range of the primary key from its front, up to the first of the `$2`
            // oldest records that is not older than `$1` (excluded), and up to the `$2`-th oldest
            // (included). Either bound, when there is none, is 11 bytes of 0xff, which sort after
            // every 10-byte versionstamp. Both are read by scans of the key from the front that
            // stop early, so a pruning with nothing due reads a row or two, and one that is due
            // reads what it deletes.
            log_prune: format!(
                "DELETE FROM {log} WHERE vs < coalesce(\
                 (SELECT head.vs FROM (SELECT vs, at FROM {log} ORDER BY vs LIMIT $2) AS head \
                 WHERE head.at >= $1 ORDER BY head.vs LIMIT 1), {past}) \
                 AND vs <= coalesce((SELECT vs FROM {log} ORDER BY vs OFFSET $2 - 1 LIMIT 1), \
                 {past})",
                past = "'\\xffffffffffffffffffffff'::bytea"
            ),
            log_configure: format!("UPDATE {meta} SET change_log_ms = $1"),
            log_clear: format!("DELETE FROM {log}"),
            log_read: format!("SELECT vs, record FROM {log} WHERE vs > $1 ORDER BY vs LIMIT $2"),
            log_all: format!("SELECT vs, record FROM {log} ORDER BY vs"),
            log_status: format!(
                "SELECT (SELECT change_log_ms FROM {meta}), (SELECT count(*) FROM {log}), \
                 (SELECT record FROM {log} ORDER BY vs LIMIT 1), \
                 (SELECT record FROM {log} ORDER BY vs DESC LIMIT 1)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lowercase_identifiers_are_schema_names() {
        for good in ["public", "_x", "kv_case_17", &"a".repeat(40)] {
            assert!(Sql::new(good).is_ok(), "{good}");
        }
        for bad in ["", "1abc", "Public", "a-b", "a\"b", "a b", &"a".repeat(41)] {
            assert!(
                matches!(Sql::new(bad), Err(PostgresError::InvalidSchemaName { .. })),
                "{bad}"
            );
        }
    }
}
