package upload

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// notInTable are the reasons of reasons.go that fail does not send: the
// overload ones go out through rpcstatus.Overload with a retry-after, and
// ReasonCompressRefused is a Record's failure reason, not a status.
var notInTable = map[string]bool{"ReasonStagingFull": true, "ReasonCompressRefused": true}

// TestReasonTable checks that every reason the upload front sends through
// fail is in reasonCodes (so it has one code), and that every reason
// declared in reasons.go is in the table.
func TestReasonTable(t *testing.T) {
	fset := token.NewFileSet()
	text := func(e ast.Expr) string {
		var b strings.Builder
		printer.Fprint(&b, fset, e)
		return b.String()
	}
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	var declared []string
	calls := map[string]token.Position{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for _, name := range n.Names {
					if p == "reasons.go" && strings.HasPrefix(name.Name, "Reason") {
						declared = append(declared, name.Name)
					}
					if name.Name == "reasonCodes" {
						for _, el := range n.Values[0].(*ast.CompositeLit).Elts {
							keys[text(el.(*ast.KeyValueExpr).Key)] = true
						}
					}
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "fail" && len(n.Args) > 0 {
					calls[text(n.Args[0])] = fset.Position(n.Pos())
				}
			}
			return true
		})
	}
	if len(keys) < 40 || len(calls) < 30 {
		t.Fatalf("found %d table keys and %d fail reasons: the parse is broken", len(keys), len(calls))
	}
	for r, pos := range calls {
		if r == "reason" { // fail itself
			continue
		}
		if !keys[r] {
			t.Errorf("%s: fail(%s) is not in reasonCodes", pos, r)
		}
	}
	for _, r := range declared {
		if !keys[r] && !notInTable[r] {
			t.Errorf("%s is declared in reasons.go but not in reasonCodes", r)
		}
	}
	for r, c := range reasonCodes {
		if c == codes.OK || c == codes.Unknown {
			t.Errorf("reason %s has code %v", r, c)
		}
	}
}
