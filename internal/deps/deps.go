// Package deps pins the project's third-party modules in go.mod while the packages that use them are being
// written in parallel, so that no engineer's `go get` or `go mod tidy` drops a dependency another relies on.
// Remove it once every module below is imported by real code.
package deps

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/elastic/go-seccomp-bpf"
	_ "github.com/landlock-lsm/go-landlock/landlock"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/sashabaranov/go-openai"
	_ "go.etcd.io/bbolt"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sys/unix"
)
