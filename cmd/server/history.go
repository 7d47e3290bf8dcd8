package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/history"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/store"
)

func newHistoryCommand(cfg *server.Config) *cobra.Command {
	var endpointFile, since, until string
	cmd := &cobra.Command{
		Use:   "history KIND/NAME",
		Short: "Print every transition an object (or every object of that name, deleted ones included) went through",
		Long: `history reads the transition history table (muster_transitions) straight from
the datastore: SQLite in --data-dir, or the PostgreSQL that
--datastore-endpoint-file or $MUSTER_DATASTORE_ENDPOINT names. It works
while the servers are down, and for objects long deleted.`,
		Args: oneArg("KIND/NAME", "for example machine/node-1"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := history.ParseObject(args[0])
			if err != nil {
				return err
			}
			q := history.Query{Kind: kind, Name: name}
			if q.Since, err = parseWhen("since", since); err != nil {
				return err
			}
			if q.Until, err = parseWhen("until", until); err != nil {
				return err
			}
			endpoint, err := secretSource{flag: "datastore-endpoint", fileFlag: "datastore-endpoint-file", env: "MUSTER_DATASTORE_ENDPOINT", file: endpointFile}.resolve()
			if err != nil {
				return err
			}
			db, dialect, err := store.OpenReadSQL(cmd.Context(), cfg.DataDir, endpoint)
			if err != nil {
				return err
			}
			defer db.Close()
			recs, err := history.Read(cmd.Context(), db, dialect, q)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				return fmt.Errorf("no transitions recorded for %s %s in that time range", kind, name)
			}
			return history.Print(cmd.OutOrStdout(), recs)
		},
	}
	cmd.Flags().StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the PostgreSQL --datastore-endpoint (default $MUSTER_DATASTORE_ENDPOINT; neither: SQLite in --data-dir)")
	cmd.Flags().StringVar(&since, "since", "", "only transitions at or after this time: RFC 3339 (2026-11-17T09:00:00Z) or a duration ago (24h)")
	cmd.Flags().StringVar(&until, "until", "", "only transitions at or before this time: RFC 3339 or a duration ago")
	return cmd
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--%s %q: give an RFC 3339 time such as 2026-11-17T09:00:00Z, or a duration ago such as 24h", flag, v)
}
