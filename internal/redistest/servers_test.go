package redistest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// matrixRow is one server of .ci/matrix.
type matrixRow struct {
	name, pkg, version string
	suites, sets       []string
}

// readMatrix parses .ci/matrix: "name package suites version sets...", with
// # comments.
func readMatrix(t *testing.T) []matrixRow {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", ".ci", "matrix"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []matrixRow
	for _, l := range strings.Split(string(src), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 5 {
			t.Fatalf(".ci/matrix: %q: want name, package, suites, version and sets", l)
		}
		rows = append(rows, matrixRow{name: f[0], pkg: f[1], suites: strings.Split(f[2], ","), version: f[3], sets: f[4:]})
	}
	return rows
}

// mdTable returns the cells of the table that follows the heading in a
// Markdown file, code spans' backticks removed, without the header rows.
func mdTable(t *testing.T, src, heading string) [][]string {
	t.Helper()
	lines := strings.Split(src, "\n")
	i := slices.Index(lines, heading)
	if i < 0 {
		t.Fatalf("docs/servers.md has no heading %q", heading)
	}
	var rows [][]string
	for _, l := range lines[i+1:] {
		if strings.HasPrefix(l, "#") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(l, "|"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "`", "")))
		}
		rows = append(rows, cells)
	}
	if len(rows) < 3 {
		t.Fatalf("docs/servers.md: the table under %q has no rows", heading)
	}
	return rows[2:] // the header and its |---| line
}

// words splits a cell of the form "a, b, c".
func words(cell string) []string { return strings.Split(cell, ", ") }

// TestServers_Doc checks that docs/servers.md's tables say what .ci/matrix
// says: the same servers in the same order, each with its package, Debian
// releases, version and sets, and a row for every set used.
func TestServers_Doc(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "docs", "servers.md"))
	if err != nil {
		t.Fatal(err)
	}
	matrix := readMatrix(t)
	table := mdTable(t, string(src), "## The matrix")
	if len(table) != len(matrix) {
		t.Errorf("docs/servers.md's matrix has %d rows, .ci/matrix %d servers", len(table), len(matrix))
	}
	used := map[string]bool{}
	for i, m := range matrix {
		for _, s := range m.sets {
			used[s] = true
		}
		if i >= len(table) {
			continue
		}
		// | server | package | Debian release | version | runs |
		row := table[i]
		if len(row) != 5 {
			t.Errorf("docs/servers.md's matrix, row %d: %d cells, want 5: %v", i+1, len(row), row)
			continue
		}
		want := []string{m.name, m.pkg, strings.Join(m.suites, ", "), m.version + "x", strings.Join(m.sets, ", ")}
		if !slices.Equal(row, want) {
			t.Errorf("docs/servers.md's matrix, row %d: %q\n.ci/matrix says:             %q", i+1, row, want)
		}
	}
	described := map[string]bool{}
	for _, row := range mdTable(t, string(src), "## The sets") {
		described[row[0]] = true
		if !used[row[0]] {
			t.Errorf("docs/servers.md describes the set %q, which .ci/matrix does not use", row[0])
		}
	}
	for s := range used {
		if !described[s] {
			t.Errorf("docs/servers.md's sets have no row for %q, which .ci/matrix uses", s)
		}
	}
}
