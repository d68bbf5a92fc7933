package hook

import "testing"

func TestItoa(t *testing.T) {
	for v, want := range map[int64]string{0: "0", 7: "7", -12: "-12", 67108864: "67108864"} {
		if got := itoa(v); got != want {
			t.Errorf("itoa(%d) = %q", v, got)
		}
	}
}
