package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	linkRe    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRe = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// Every link of the repository's Markdown stays in the repository and arrives: a relative link names a
// file or directory of the clone (never ../shared or a development machine's path), and an anchor names a
// heading of its document. Links to the web (https://…) are not followed.
func TestLinksStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs("..")
	must(t, err)
	docs := markdownFiles(t, root)
	if len(docs) < 10 {
		t.Fatalf("found %d Markdown files under %s", len(docs), root)
	}
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		must(t, err)
		rel, _ := filepath.Rel(root, doc)
		for _, m := range linkRe.FindAllStringSubmatch(outsideCode(string(raw)), -1) {
			if why := badLink(root, doc, m[1]); why != "" {
				t.Errorf("%s: link %s %s", rel, m[1], why)
			}
		}
	}
}

// badLink says what is wrong with target, a link in doc ("" when nothing is).
func badLink(root, doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	file := doc
	if path != "" {
		if filepath.IsAbs(path) {
			return "is an absolute path: it exists only on the machine that wrote it"
		}
		file = filepath.Join(filepath.Dir(doc), path)
		if r, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(r, "..") {
			return "leaves the repository: a clone does not have it"
		}
		if _, err := os.Stat(file); err != nil {
			return "names nothing in the repository"
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, h := range headingRe.FindAllStringSubmatch(outsideCode(string(raw)), -1) {
		if slug(h[1]) == anchor {
			return ""
		}
	}
	return "names no heading of " + filepath.Base(file)
}

// slug is GitHub's anchor of a heading: lower case, punctuation dropped but hyphens and underscores, each
// space a hyphen.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ToUpper(string(r)) != strings.ToLower(string(r)) }

// outsideCode is text with its fenced blocks blanked, so that links and headings inside examples do not
// count.
func outsideCode(text string) string {
	lines := strings.Split(text, "\n")
	var fence string
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if m := fenceRe.FindStringSubmatch(l); fence == "" && m != nil {
			fence, lines[i] = m[1], ""
			continue
		}
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// markdownFiles are the repository's Markdown files (node_modules left out).
func markdownFiles(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	must(t, err)
	return out
}
