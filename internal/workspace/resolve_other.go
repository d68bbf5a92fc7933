//go:build !linux

package workspace

// newResolver uses os.Root: openat2 is Linux-only.
func newResolver(real string) (resolver, error) {
	r, err := newRootResolver(real)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// forcePortableResolver exists for the shared tests; os.Root is the only resolver here.
var forcePortableResolver bool
