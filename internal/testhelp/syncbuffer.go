package testhelp

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a process's output may be written to while a test reads it (a
// server's log, watched for the line that says it is ready).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
