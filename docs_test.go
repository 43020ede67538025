package redislock_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the Markdown files whose links TestDocs_LinksResolve checks:
// the README and every file of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append([]string{"README.md"}, files...)
}

// A mdLink is a link target found in a Markdown file, with its line.
type mdLink struct {
	line   int
	target string
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title"; the text may hold one level of brackets.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [label]: target
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	// codeSpan matches an inline code span, whose text is not Markdown.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// htmlAnchor matches an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// mdLines returns the lines of a Markdown file that are not inside a fenced
// code block (those are blanked, so that line numbers stay right).
func mdLines(src string) []string {
	lines := strings.Split(src, "\n")
	fence := ""
	for i, l := range lines {
		trim := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~")):
			fence = trim[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// links returns the link targets of a Markdown file, outside code.
func links(src string) []mdLink {
	var out []mdLink
	for i, l := range mdLines(src) {
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, mdLink{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, mdLink{i + 1, m[1]})
		}
	}
	return out
}

// anchors returns the anchors of a Markdown file's headings, as GitHub makes
// them, and its explicit <a id> anchors.
func anchors(src string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, l := range mdLines(src) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			set[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := slugify(m[2])
		if n := seen[slug]; n > 0 {
			set[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			set[slug] = true
		}
		seen[slug]++
	}
	return set
}

// slugify makes a heading's anchor as GitHub does: the heading's text (a
// link's text for a link, code without its backticks), lower-cased, with
// every character but letters, digits, spaces, '-' and '_' dropped, and
// spaces turned into '-'.
func slugify(h string) string {
	h = inlineLink.ReplaceAllStringFunc(h, func(s string) string {
		s = strings.TrimPrefix(s, "!")
		return s[1:strings.Index(s, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestDocs_LinksResolve checks that every relative link in README.md and
// docs/*.md names a file or directory of the repository, and that a
// #section of a Markdown file names one of its headings.
func TestDocs_LinksResolve(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	anchorsIn := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchorsOf[path] = anchors(string(src))
		return anchorsOf[path], nil
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range docFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(src)) {
			u, err := url.Parse(l.target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // absolute: not checked here
			}
			checked++
			path := file
			if u.Path != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(u.Path))
				abs, err := filepath.Abs(path)
				if err != nil {
					t.Fatal(err)
				}
				if abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
					t.Errorf("%s:%d: link %q leaves the repository", file, l.line, l.target)
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: no such file or directory", file, l.line, l.target)
					continue
				}
			}
			if u.Fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsIn(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
				continue
			}
			if !a[u.Fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.line, l.target, path, u.Fragment)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the link parser is broken")
	}
}

// TestDocs_Slugify checks the anchors against GitHub's for headings of the
// kinds the docs use.
func TestDocs_Slugify(t *testing.T) {
	for h, want := range map[string]string{
		"Waiting: a fair line, handed over directly": "waiting-a-fair-line-handed-over-directly",
		"Renewals don't share fate":                  "renewals-dont-share-fate",
		"10,000 kept locks":                          "10000-kept-locks",
		"The `WithLock` call":                        "the-withlock-call",
		"From [bsm](https://github.com/bsm) and x_y": "from-bsm-and-x_y",
		"One uncontended Obtain + Release":           "one-uncontended-obtain--release",
	} {
		if got := slugify(h); got != want {
			t.Errorf("slugify(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestDocs_LinkParser checks that links are found outside code only.
func TestDocs_LinkParser(t *testing.T) {
	src := "a [x](a.md#b) and `[y](not.md)` and ![i](img.png \"t\")\n" +
		"```go\n[z](not.md)\n```\n" +
		"[ref]: docs/r.md\n" +
		"[tests](x_test.go), [[1]](n.md)\n"
	var got []string
	for _, l := range links(src) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := "1:a.md#b 1:img.png 5:docs/r.md 6:x_test.go 6:n.md"
	if strings.Join(got, " ") != want {
		t.Errorf("links = %q, want %q", strings.Join(got, " "), want)
	}
}

// The README's two commands: the demo, and the tests of the modules that
// have them (the library, at its go.mod's requirements, outside the
// workspace; tests/, examples/ and cmd/redislock in it), after the line that
// makes the workspace of the checkout's modules when there is none.
const (
	demoCommand = "(cd examples && go run ./oversell)"
	testCommand = "[ -f go.work ] || go work init . ./tests ./examples ./cmd/redislock ./otelredislock ./bench\n" +
		"GOWORK=off go test -race ./... && (cd tests && go test -race ./...) && (cd examples && go test -race ./...) && (cd cmd/redislock && go test -race ./...)"
)

// TestDocs_README checks the README's promises to newcomers and to CI: at
// most 12,000 bytes, the two commands word for word (CI runs the test
// command as written, with GOFLAGS=-count=1), and a quickstart that is a
// gofmt-formatted Go program.
func TestDocs_README(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(src) > 12000 {
		t.Errorf("README.md is %d bytes; keep it to 12,000 and move the depth to docs/", len(src))
	}
	for _, cmd := range []string{demoCommand, testCommand} {
		if !bytes.Contains(src, []byte("```sh\n"+cmd+"\n```")) {
			t.Errorf("README.md has no sh block with exactly %q", cmd)
		}
	}
	ci, err := os.ReadFile(filepath.Join(".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ci, []byte("\nexport GOFLAGS=-count=1\n"+testCommand+" || exit 1\n")) {
		t.Errorf(".ci/run has no line %q after GOFLAGS=-count=1: the README's test command word for word", testCommand+" || exit 1")
	}
	_, rest, ok := strings.Cut(string(src), "```go\npackage main\n")
	if !ok {
		t.Fatal("README.md has no quickstart program (a go block starting with package main)")
	}
	prog, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: the quickstart's go block does not end")
	}
	prog = "package main\n" + prog
	formatted, err := format.Source([]byte(prog))
	if err != nil {
		t.Fatalf("README.md: the quickstart is not Go: %v", err)
	}
	if string(formatted) != prog {
		t.Error("README.md: the quickstart is not gofmt-formatted")
	}
}

// libraryDirs are the library's packages: the root and its layers.
var libraryDirs = []string{".", "internal/scripts", "internal/lease", "internal/line", "internal/backend"}

// luaDir holds the scripts.
const luaDir = "internal/scripts/lua"

// Comments name only what exists: every "see X" in a comment of the
// library (and every `X` in backquotes) where X looks like a name is a
// declaration of one of its packages (Name, Type.Member, or a member on its
// own), a file of the repository (scripts.go, lua/take.lua, docs/...), or a
// name of a package the code imports (context.Cause, scripts.Redis). A
// comment that names a script or a function that is gone fails here.
func TestDocs_CommentsNameWhatExists(t *testing.T) {
	fset := token.NewFileSet()
	pkgs := map[string]*ast.Package{}
	for _, dir := range libraryDirs {
		ps, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range ps {
			pkgs[dir+":"+name] = p
		}
	}
	names := map[string]bool{}
	imports := map[string]bool{}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
			for _, im := range f.Imports {
				path := strings.Trim(im.Path.Value, `"`)
				imports[path[strings.LastIndex(path, "/")+1:]] = true
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					names[n.Name.Name] = true
					if n.Recv != nil && len(n.Recv.List) > 0 {
						names[recvName(n.Recv.List[0].Type)+"."+n.Name.Name] = true
					}
				case *ast.TypeSpec:
					names[n.Name.Name] = true
					switch tt := n.Type.(type) {
					case *ast.StructType:
						for _, fl := range tt.Fields.List {
							for _, id := range fl.Names {
								names[id.Name], names[n.Name.Name+"."+id.Name] = true, true
							}
						}
					case *ast.InterfaceType:
						for _, m := range tt.Methods.List {
							for _, id := range m.Names {
								names[id.Name], names[n.Name.Name+"."+id.Name] = true, true
							}
						}
					}
				case *ast.ValueSpec:
					for _, id := range n.Names {
						names[id.Name] = true
					}
				}
				return true
			})
		}
	}
	luaFiles, _ := filepath.Glob(filepath.Join(luaDir, "*.lua"))
	for _, f := range luaFiles { // the scripts' functions, named from Go's comments too
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`local function (\w+)`).FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	words := map[string]bool{"the": true, "above": true, "below": true, "go-redis": true, "its": true, "their": true, "how": true, "what": true, "why": true, "when": true, "which": true, "where": true, "each": true, "a": true, "an": true, "that": true, "this": true, "it": true, "them": true, "also": true, "also:": true}
	ref := regexp.MustCompile("\\bsee ([A-Za-z_][A-Za-z0-9_./-]*[A-Za-z0-9_])|`([A-Za-z_][A-Za-z0-9_./-]*)`")
	resolves := func(x string) bool {
		if words[x] || names[x] {
			return true
		}
		for _, dir := range libraryDirs {
			if _, err := os.Stat(filepath.Join(dir, x)); err == nil {
				return true
			}
		}
		if _, err := os.Stat(filepath.Join(luaDir, x)); err == nil {
			return true
		}
		if _, err := os.Stat(filepath.Join(luaDir, strings.TrimPrefix(x, "lua/"))); err == nil {
			return true
		}
		if pkg, name, ok := strings.Cut(x, "."); ok && imports[pkg] && name != "" {
			return true
		}
		if _, member, ok := strings.Cut(x, "."); ok && names[member] {
			return true // a member of a value: lk.clock, ln.hold
		}
		return false
	}
	for _, f := range files {
		for _, cg := range f.Comments {
			text := strings.Join(strings.Fields(cg.Text()), " ") // a reference may span lines
			for _, m := range ref.FindAllStringSubmatch(text, -1) {
				if x := m[1] + m[2]; !resolves(x) {
					t.Errorf("%s: a comment names %q, which is not a name of the package, a file, or an imported package's name", fset.Position(cg.Pos()), x)
				}
			}
		}
	}
}

// recvName is the type name of a method's receiver.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// TestDocs_PublishedModules checks what docs/development.md promises of the
// modules published beside the library (the command and otelredislock):
// each can be installed or required from its tag, so its go.mod has no
// replace (go install refuses one), requires the library at a released
// version (not a pseudo-version), and asks for no newer Go than the
// library's go line.
func TestDocs_PublishedModules(t *testing.T) {
	goLine := func(mod string) string {
		m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(mod)
		if m == nil {
			t.Fatal("no go line")
		}
		return m[1]
	}
	root, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"cmd/redislock", "otelredislock"} {
		src, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		mod := string(src)
		if regexp.MustCompile(`(?m)^replace\b`).MatchString(mod) {
			t.Errorf("%s/go.mod has a replace directive: go install and go get of its tag would fail", dir)
		}
		if !regexp.MustCompile(`(?m)^\s*github\.com/seed5e0b76d9/redislock v\d+\.\d+\.\d+$`).MatchString(mod) {
			t.Errorf("%s/go.mod does not require the library at a released version", dir)
		}
		if got, want := goLine(mod), goLine(string(root)); got != want {
			t.Errorf("%s/go.mod: go %s, want the library's go %s", dir, got, want)
		}
	}
}
