package store

import "os"

var exit = os.Exit
