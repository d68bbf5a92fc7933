package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// subdirs and readSmall return what os.ReadDir and os.ReadFile do: only
// directories (no files, no "." or ".."), and whole files however long.
func TestRawIOMatchesOS(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 300 { // more entries than one getdents buffer holds
		name := "d" + strconv.Itoa(i) + strings.Repeat("x", i%40)
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := subdirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("subdirs: %d names, want %d", len(got), len(want))
	}
	if _, err := subdirs(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("subdirs of a missing dir: %v", err)
	}
	for _, n := range []int{0, 1, 511, 512, 513, 70000} {
		p := filepath.Join(dir, "f"+strconv.Itoa(n))
		body := strings.Repeat("7\n", n/2) + strings.Repeat("x", n%2)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := readSmall(p)
		if err != nil || string(b) != body {
			t.Errorf("readSmall of %d bytes: %d bytes, %v", n, len(b), err)
		}
	}
	if _, err := readSmall(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("readSmall of a missing file: %v", err)
	}
}
