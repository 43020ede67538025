package scripts

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write lua/consts.lua")

// The values that Go and the scripts share come from one place, the Go
// constants: lua/consts.lua, which every script starts with, is what
// luaConsts writes (go test -run TestScripts_ConstsFileIsCurrent -update
// writes it again).
func TestScripts_ConstsFileIsCurrent(t *testing.T) {
	if *update {
		if err := os.WriteFile("lua/consts.lua", []byte(luaConsts()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("lua/consts.lua")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != luaConsts() {
		t.Errorf("lua/consts.lua differs from luaConsts(): run go test -run TestScripts_ConstsFileIsCurrent -update")
	}
}

// No script types a value that Go and Lua share: the layout, a reply code
// or a special lease appears in lua/ by its name from consts.lua only (a
// return of a bare number, or "rl1" spelled out, would be a second place
// that must agree with Go).
func TestScripts_SharedValuesByName(t *testing.T) {
	files, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	bareReturn := regexp.MustCompile(`return\s*\{?\s*-?\d`)
	for _, f := range files {
		if f.Name() == "consts.lua" {
			continue
		}
		b, _ := luaFiles.ReadFile("lua/" + f.Name())
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if strings.Contains(code, Layout) || bareReturn.MatchString(code) {
				t.Errorf("lua/%s:%d: a shared value spelled out: %s", f.Name(), i+1, strings.TrimSpace(line))
			}
		}
	}
}

// Every script names the parts it needs, and load joins them: each script
// compiles in Redis (see the examples and tests/, which run them all); here,
// that each names only parts that exist.
func TestScripts_PartsExist(t *testing.T) {
	files, _ := luaFiles.ReadDir("lua")
	for _, f := range files {
		b, _ := luaFiles.ReadFile("lua/" + f.Name())
		m := parts.FindStringSubmatch(string(b))
		if m == nil {
			if !strings.Contains(string(b), "(a part") && f.Name() != "consts.lua" {
				t.Errorf("lua/%s: neither a script with a parts line nor a part", f.Name())
			}
			continue
		}
		for _, p := range strings.Fields(m[1]) {
			if _, err := luaFiles.ReadFile("lua/" + p + ".lua"); p != "(none)" && err != nil {
				t.Errorf("lua/%s names the part %s: %v", f.Name(), p, err)
			}
		}
	}
}
