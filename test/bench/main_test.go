package bench

import (
	"os"
	"testing"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m.Run)) }
