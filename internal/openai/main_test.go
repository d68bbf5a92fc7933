package openai

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind (client streams, test servers).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
