//go:build linux && !(amd64 || arm64)

package spawner

// spawnRaw: the raw helper (package rawchild) exists for amd64 and arm64
// only; elsewhere every block gets the Go helper.
func spawnRaw(req *Request, fds []int) Reply {
	return Reply{Fallback: "the raw helper is built for amd64 and arm64 only"}
}

func afterReply() {}

func endIdle() {}
