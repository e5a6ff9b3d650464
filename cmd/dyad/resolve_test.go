package main

import (
	"strings"
	"testing"

	"github.com/dyad-db/dyad/internal/conflict"
)

func TestKeySelection(t *testing.T) {
	set := &conflict.Set{Keys: []conflict.Key{{Key: []byte("/a/1")}, {Key: []byte("/a/2")}, {Key: []byte("/b/1")}, {Key: []byte("/c")}}}
	done := map[string]conflict.Resolution{"/a/2": {Action: "applied"}}
	tests := []struct {
		name string
		sel  keySelection
		want string
		err  bool
	}{
		{"nothing named", keySelection{}, "", true},
		{"all open keys", keySelection{all: true}, "/a/1 /b/1 /c", false},
		{"a prefix skips resolved keys", keySelection{prefixes: []string{"/a/"}}, "/a/1", false},
		{"keys and prefixes", keySelection{keys: []string{"/c", "/missing"}, prefixes: []string{"/b"}}, "/b/1 /c", false},
	}
	for _, tt := range tests {
		got, err := tt.sel.pick(set, done)
		if (err != nil) != tt.err {
			t.Errorf("%s: err = %v", tt.name, err)
			continue
		}
		var names []string
		for _, k := range got {
			names = append(names, string(k.Key))
		}
		if strings.Join(names, " ") != tt.want {
			t.Errorf("%s: picked %q, want %q", tt.name, strings.Join(names, " "), tt.want)
		}
	}
}
