// Package sqldialect is the one home of what differs between the SQL
// databases Muster keeps its own tables in beside kine's (migrations, the
// transition history): their names and their placeholders.
package sqldialect

import (
	"strconv"
	"strings"
)

// The dialects, as internal/store names a datastore's backend.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Rebind turns the ? placeholders of a query written once for both
// dialects into PostgreSQL's $1, $2, ...; SQLite takes them as they are.
func Rebind(dialect, q string) string {
	if dialect != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
