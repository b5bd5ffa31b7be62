package main

import "willow/cmd/internal/daemontest"

// Run is run, for the black-box tests.
var Run daemontest.Run = run

// File is the config file type.
type File = file
