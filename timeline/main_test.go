package timeline_test

import (
	"os"
	"testing"

	"willow/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
