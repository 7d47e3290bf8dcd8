package sqldialect

import "testing"

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ dialect, in, want string }{
		{SQLite, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = ? AND c = ?"},
		{Postgres, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{Postgres, "DELETE FROM t", "DELETE FROM t"},
		{Postgres, "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
	} {
		if got := Rebind(tc.dialect, tc.in); got != tc.want {
			t.Errorf("Rebind(%s, %q) = %q, want %q", tc.dialect, tc.in, got, tc.want)
		}
	}
}
