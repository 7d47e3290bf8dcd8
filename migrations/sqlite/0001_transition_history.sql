-- The full transition history: one row per transition of any lifecycle
-- object (Cluster, ClusterRegistrationToken, ClusterRegistration, Machine),
-- kept after the object is deleted, pruned only by the retention flags.
-- Documented for SQL users in docs/datastore.md.
CREATE TABLE muster_transitions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    uid        TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    from_phase TEXT    NOT NULL,
    to_phase   TEXT    NOT NULL,
    event      TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    caused_by  TEXT    NOT NULL DEFAULT '',
    at         TEXT    NOT NULL,
    revision   INTEGER NOT NULL,
    UNIQUE (uid, seq)
);
CREATE INDEX muster_transitions_object ON muster_transitions (kind, name, at);
CREATE INDEX muster_transitions_at ON muster_transitions (at);

-- How far the history writer has read the datastore's change feed: after a
-- crash it resumes from here, so a change made while it was down (a
-- deletion included) is still recorded.
CREATE TABLE muster_history_cursor (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL
);
