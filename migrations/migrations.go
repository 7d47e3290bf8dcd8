// Package migrations holds the versioned SQL that muster-server applies at
// startup for the tables it keeps beside kine's: one directory per SQL
// dialect, one file per version, named NNNN_what.sql. Both dialects carry
// the same versions. Files are embedded into the binary, so a server knows
// exactly the schema versions it was built with; internal/store applies
// them in order and records each in muster_schema_version.
//
// A released file is never edited: a change is a new version.
package migrations

import "embed"

// SQL holds sqlite/NNNN_*.sql and postgres/NNNN_*.sql.
//
//go:embed sqlite/*.sql postgres/*.sql
var SQL embed.FS
