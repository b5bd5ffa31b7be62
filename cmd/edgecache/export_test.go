package main

// Run is the binary, for the black-box tests.
var Run = run
