package markdown

import (
	"fmt"
	"strings"
	"testing"
)

// benchBody builds a body of about size bytes: prose paragraphs and blocks of blockLines lines each.
func benchBody(size, blockLines int, indent string) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "Paragraph %d with ``inline`` code and a ``` in prose.\n", i)
		fmt.Fprintf(&b, "%s```python title=step%d.py\n", indent, i)
		for j := 0; j < blockLines; j++ {
			fmt.Fprintf(&b, "%sprint('line %d of block %d')\n", indent, j, i)
		}
		fmt.Fprintf(&b, "%s```\n\n", indent)
	}
	return b.String()
}

func benchmarkExtract(b *testing.B, body string) {
	src := []Source{{Message: 0, Text: body}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		blocks, err := Extract(src)
		if err != nil {
			b.Fatal(err)
		}
		n = len(blocks)
	}
	b.ReportMetric(float64(n), "blocks")
}

// BenchmarkExtract measures a 10 MiB body (the default --max-body-bytes) in three shapes: few large
// blocks (the zero-copy path), thousands of small blocks, and indented blocks (the copying path).
func BenchmarkExtract(b *testing.B) {
	const size = 10 << 20
	b.Run("large-blocks", func(b *testing.B) { benchmarkExtract(b, benchBody(size, 20000, "")) })
	b.Run("small-blocks", func(b *testing.B) { benchmarkExtract(b, benchBody(size, 2, "")) })
	b.Run("indented", func(b *testing.B) { benchmarkExtract(b, benchBody(size, 50, "  ")) })
	b.Run("unclosed-tail", func(b *testing.B) {
		body := benchBody(size, 50, "") + "~~~sh\n" + strings.Repeat("x\n", 1000)
		src := []Source{{Message: 0, Text: body}}
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := Extract(src); err == nil {
				b.Fatal("expected unclosed fence")
			}
		}
	})
}
