#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO

/// The tables of a PostgreSQL ledger, created and upgraded by numbered migrations.
///
/// Each ledger has a schema of its own. `schema_migrations` lists the migrations applied; a
/// migration runs in the transaction that holds the ledger's advisory lock, so two processes
/// never apply one twice, and a database migrated by a newer version is refused, not guessed at.
///
/// The tables (version 1, as later versions changed them: 2 added `head.note`, 3 the table
/// `subject_map`, 4 `subjects.sig`, 5 dropped the byte offsets of `events` and `line_index`, 6
/// dropped `signing_key` where it held no seed, 7 added the functions `head_state` and
/// `append_commit`):
///
/// | table          | what it holds                                                                    |
/// |----------------|----------------------------------------------------------------------------------|
/// | `ledger`       | one row: the catalogue's canonical bytes and the Ed25519 public key             |
/// | `signing_key`  | (until version 6) one row: the Ed25519 seed; now dropped when empty, and a seed still there is moved into a key file by `consentctl key move-out` |
/// | `events`       | the log: one row per entry (`seq` = position, `line` = the entry's bytes)        |
/// | `head`         | one row: the signed head (note), with the seq and hash it names                 |
/// | `line_index`   | derived: per entry, its stream key (`subject`, 16 bytes)                         |
/// | `tree_hashes`  | derived: the Merkle tree's stored hashes in tlog order (as tree.hashes)         |
/// | `subjects`     | subject id → pseudonym salt (the only personal data)                            |
/// | `checkpoints`  | signed checkpoints the ledger issued, by tree size                              |
///
/// `events` refuses UPDATE, DELETE and TRUNCATE with a trigger: the log is append-only in the
/// database too, not only in this code.
///
/// Two functions save round trips, each one statement for what took a dozen:
/// - `head_state(lock_key)`: takes the ledger's advisory lock (unless `lock_key` is NULL), then
///   reads the head, the newest entry and how many rows each derived table holds. PL/pgSQL runs
///   each statement of a volatile function on a new snapshot, so the reads see whatever the
///   previous holder of the lock committed.
/// - `append_commit(…)`: takes the lock and writes a whole commit (subject records, entries,
///   derived rows, head). Given the head the writer expects, it first checks that the head is
///   still that one and that the derived tables end where the writer remembers, and refuses
///   with SQLSTATE 40001 (nothing written) when another writer moved it or a repair deleted
///   derived rows: a writer that remembers the head of its own last commit then writes a command in
///   one round trip, its own transaction, without BEGIN, a read or COMMIT.
enum PostgresSchema {
    struct Migration: Sendable {
        let version: Int
        let description: String
        let statements: @Sendable (String) -> [String]
    }

    static let migrations: [Migration] = [
        Migration(version: 1, description: "events, head, line index, tree hashes, subjects, checkpoints") { s in
            [
                "CREATE TABLE \(s).ledger (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), catalog bytea NOT NULL, public_key bytea NOT NULL CHECK (octet_length(public_key) = 32), created_at timestamptz NOT NULL DEFAULT now())",
                "CREATE TABLE \(s).signing_key (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seed bytea NOT NULL CHECK (octet_length(seed) = 32))",
                "CREATE TABLE \(s).events (seq bigint PRIMARY KEY CHECK (seq >= 0), byte_offset bigint NOT NULL UNIQUE CHECK (byte_offset >= 0), line bytea NOT NULL)",
                "CREATE TABLE \(s).head (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seq bigint NOT NULL, hash bytea NOT NULL CHECK (octet_length(hash) = 32))",
                "CREATE TABLE \(s).line_index (seq bigint PRIMARY KEY, byte_offset bigint NOT NULL, length integer NOT NULL, subject bytea NOT NULL CHECK (octet_length(subject) = 16))",
                "CREATE INDEX line_index_by_subject ON \(s).line_index (subject, seq)",
                "CREATE TABLE \(s).tree_hashes (idx bigint PRIMARY KEY, hash bytea NOT NULL CHECK (octet_length(hash) = 32))",
                "CREATE TABLE \(s).subjects (subject_id bytea PRIMARY KEY, salt bytea NOT NULL CHECK (octet_length(salt) = 16))",
                "CREATE TABLE \(s).checkpoints (size bigint PRIMARY KEY, note text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())",
                """
                CREATE FUNCTION \(s).refuse_event_change() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'the ledger''s events are append-only: % refused', TG_OP; END $$
                """,
                "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON \(s).events FOR EACH STATEMENT EXECUTE FUNCTION \(s).refuse_event_change()",
            ]
        },
        // The head becomes signed: a checkpoint note with a 'chain' line. Rows of version 1 keep
        // a NULL note (an unsigned head) until the next write signs one.
        Migration(version: 2, description: "signed head") { s in
            ["ALTER TABLE \(s).head ADD COLUMN note text"]
        },
        // The subject map's nodes (derived data, like the line index): one row per record.
        Migration(version: 3, description: "subject map") { s in
            ["CREATE TABLE \(s).subject_map (idx bigint PRIMARY KEY CHECK (idx >= 0), record bytea NOT NULL CHECK (octet_length(record) = 88))"]
        },
        // Subject records are signed by the ledger's key (NULL in rows of a format-1 ledger).
        Migration(version: 4, description: "signed subject records") { s in
            ["ALTER TABLE \(s).subjects ADD COLUMN sig bytea CHECK (sig IS NULL OR octet_length(sig) = 64)"]
        },
        // Rows by sequence number, nothing of a file: the byte offsets that imitated
        // ledger.jsonl go.
        Migration(version: 5, description: "entries by sequence number only") { s in
            [
                "ALTER TABLE \(s).events DROP COLUMN byte_offset",
                "ALTER TABLE \(s).line_index DROP COLUMN byte_offset, DROP COLUMN length",
            ]
        },
        // The secret key leaves the database. An empty table goes now; a seed is never dropped
        // unseen: it stays until `consentctl key move-out` has written it to a key file.
        Migration(version: 6, description: "no secret key in the database") { s in
            ["DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM \(s).signing_key) THEN DROP TABLE \(s).signing_key; END IF; END $$"]
        },
        // One round trip for what took a dozen (see above).
        Migration(version: 7, description: "head_state and append_commit") { s in
            [
                """
                CREATE FUNCTION \(s).head_state(lock_key text)
                RETURNS TABLE (o_head_seq bigint, o_head_hash bytea, o_head_note text, o_last_seq bigint, o_last_line bytea, o_indexed bigint, o_tree_hashes bigint, o_map_records bigint)
                LANGUAGE plpgsql VOLATILE AS $$
                BEGIN
                    IF lock_key IS NOT NULL THEN PERFORM pg_advisory_xact_lock(hashtextextended(lock_key, 0)); END IF;
                    RETURN QUERY SELECT h.seq, h.hash, h.note, e.seq, e.line,
                        (SELECT coalesce(max(i.seq) + 1, 0) FROM \(s).line_index i)::bigint,
                        (SELECT coalesce(max(t.idx) + 1, 0) FROM \(s).tree_hashes t)::bigint,
                        (SELECT coalesce(max(m.idx) + 1, 0) FROM \(s).subject_map m)::bigint
                    FROM (SELECT 1) AS one
                    LEFT JOIN \(s).head h ON true
                    LEFT JOIN LATERAL (SELECT l.seq, l.line FROM \(s).events l ORDER BY l.seq DESC LIMIT 1) e ON true;
                END $$
                """,
                """
                CREATE FUNCTION \(s).append_commit(
                    lock_key text, expected_seq bigint, expected_hash bytea, first_seq bigint, lines bytea[],
                    subject_ids bytea[], subject_salts bytea[], subject_sigs bytea[],
                    revised_ids bytea[], revised_salts bytea[], revised_sigs bytea[], removed_ids bytea[],
                    map_at bigint, map_records bytea[], index_from bigint, index_keys bytea[], tree_from bigint, tree_hashes bytea[],
                    head_seq bigint, head_hash bytea, head_note text, erased_ids bytea[],
                    expected_indexed bigint, expected_tree_hashes bigint, expected_map_records bigint)
                RETURNS text LANGUAGE plpgsql VOLATILE
                -- Its statements' plans are made once per session, not once per call.
                SET plan_cache_mode = force_generic_plan
                AS $$
                BEGIN
                    PERFORM pg_advisory_xact_lock(hashtextextended(lock_key, 0));
                    IF expected_seq IS NOT NULL AND NOT EXISTS (SELECT 1 FROM \(s).head h WHERE h.seq = expected_seq AND h.hash = expected_hash) THEN
                        RAISE EXCEPTION 'the ledger''s head is no longer seq %: another writer committed since', expected_seq USING ERRCODE = '40001';
                    END IF;
                    -- The derived rows must end where the writer remembers them ending: rows deleted
                    -- to be rebuilt (a repair) are rebuilt by a locked write, not written around.
                    IF expected_seq IS NOT NULL AND (
                        expected_indexed <> (SELECT coalesce(max(i.seq) + 1, 0) FROM \(s).line_index i)
                        OR expected_tree_hashes <> (SELECT coalesce(max(th.idx) + 1, 0) FROM \(s).tree_hashes th)
                        OR expected_map_records <> (SELECT coalesce(max(m.idx) + 1, 0) FROM \(s).subject_map m)) THEN
                        RAISE EXCEPTION 'the ledger''s derived rows are not where this writer left them' USING ERRCODE = '40001';
                    END IF;
                    -- Each statement runs only when it has rows to write: a join with an empty list
                    -- may still scan the whole table.
                    IF cardinality(subject_ids) > 0 THEN
                        INSERT INTO \(s).subjects (subject_id, salt, sig)
                            SELECT t.id, t.salt, NULLIF(t.sig, ''::bytea) FROM unnest(subject_ids, subject_salts, subject_sigs) AS t(id, salt, sig);
                    END IF;
                    IF cardinality(revised_ids) > 0 THEN
                        UPDATE \(s).subjects AS r SET sig = t.sig FROM unnest(revised_ids, revised_salts, revised_sigs) AS t(id, salt, sig)
                            WHERE r.subject_id = t.id AND r.salt = t.salt;
                    END IF;
                    IF cardinality(removed_ids) > 0 THEN
                        DELETE FROM \(s).subjects r WHERE r.subject_id = ANY(removed_ids);
                    END IF;
                    INSERT INTO \(s).events (seq, line) SELECT first_seq + t.o - 1, t.line FROM unnest(lines) WITH ORDINALITY AS t(line, o);
                    IF map_at IS NOT NULL THEN
                        DELETE FROM \(s).subject_map m WHERE m.idx >= map_at;
                        INSERT INTO \(s).subject_map (idx, record) SELECT map_at + t.o - 1, t.record FROM unnest(map_records) WITH ORDINALITY AS t(record, o);
                    END IF;
                    DELETE FROM \(s).line_index i WHERE i.seq >= index_from;
                    IF cardinality(index_keys) > 0 THEN
                        INSERT INTO \(s).line_index (seq, subject) SELECT index_from + t.o - 1, t.key FROM unnest(index_keys) WITH ORDINALITY AS t(key, o);
                    END IF;
                    DELETE FROM \(s).tree_hashes th WHERE th.idx >= tree_from;
                    IF cardinality(tree_hashes) > 0 THEN
                        INSERT INTO \(s).tree_hashes (idx, hash) SELECT tree_from + t.o - 1, t.hash FROM unnest(tree_hashes) WITH ORDINALITY AS t(hash, o);
                    END IF;
                    IF head_seq IS NOT NULL THEN
                        INSERT INTO \(s).head (seq, hash, note) VALUES (head_seq, head_hash, head_note)
                            ON CONFLICT (only_row) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, note = excluded.note;
                    END IF;
                    IF cardinality(erased_ids) > 0 THEN
                        DELETE FROM \(s).subjects r WHERE r.subject_id = ANY(erased_ids);
                        -- The transaction's id: snapshots older than it may still see the deleted rows.
                        RETURN (SELECT a.backend_xid::text FROM pg_stat_activity a WHERE a.pid = pg_backend_pid());
                    END IF;
                    RETURN NULL;
                END $$
                """,
            ]
        },
    ]

    static var latestVersion: Int { migrations.last!.version }

    /// A schema name as SQL text: quoted, so that names such as `user` or `order` work too.
    /// (``PostgresLedgerAddress`` allows only lowercase letters, digits and _.)
    static func quoted(_ schema: String) -> String { "\"" + schema + "\"" }

    /// The version the schema is at: nil when there is no ledger schema at all.
    static func version(_ session: PostgresSession, schema: String) throws -> Int? {
        // to_regclass, unlike information_schema, also sees tables the role may not read.
        let exists = try session.query("SELECT to_regclass($1) IS NOT NULL", PostgresBindings(quoted(schema) + ".schema_migrations"))
        guard let row = exists.first, try row.decode(Bool.self) else { return nil }
        let rows = try session.query("SELECT coalesce(max(version), 0)::bigint FROM \(quoted(schema)).schema_migrations")
        guard let version = rows.first else { return 0 }
        return Int(try version.decode(Int64.self))
    }

    /// Brings the schema up to ``latestVersion``, creating it when `create` is set. Run inside a
    /// transaction holding the ledger's advisory lock.
    static func migrate(_ session: PostgresSession, schema: String, create: Bool) throws {
        let current: Int
        if let version = try version(session, schema: schema) {
            current = version
        } else {
            guard create else {
                throw ConsentError.notFound(.ledger, "no ledger at \(session.address) (run 'consentctl init --store \(session.address)' to create one)")
            }
            try session.query("CREATE SCHEMA IF NOT EXISTS \(quoted(schema))")
            try session.query("CREATE TABLE \(quoted(schema)).schema_migrations (version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
            current = 0
        }
        guard current <= latestVersion else {
            throw ConsentError.storage("the ledger at \(session.address) has schema version \(current); this consentctl knows versions up to \(latestVersion): upgrade consentctl")
        }
        for migration in migrations where migration.version > current {
            for statement in migration.statements(quoted(schema)) { try session.query(statement) }
            try session.query(
                "INSERT INTO \(quoted(schema)).schema_migrations (version, description) VALUES ($1, $2)",
                PostgresBindings(Int64(migration.version), migration.description))
        }
    }
}
#endif
