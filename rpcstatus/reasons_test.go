package rpcstatus_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// reasonHelpers are the functions besides rpcstatus.New and Overload whose
// first argument is a reason code (upload's table-backed constructor).
var reasonHelpers = map[string]bool{"fail": true}

// TestReasonsAreConstants walks the module and holds every package to the
// rule that a reason code is declared once, as a Reason* constant in the
// package's reasons.go, and that producers and consumers (tests included)
// name it through that constant:
//   - a Reason* string constant is declared only in a file named reasons.go;
//   - rpcstatus.New, rpcstatus.Overload and upload's fail never get a
//     string literal as their reason;
//   - no comparison, switch case or struct field about a reason uses a
//     string literal equal to a declared reason.
func TestReasonsAreConstants(t *testing.T) {
	fset := token.NewFileSet()
	type file struct {
		path string
		f    *ast.File
	}
	var files []file
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "proto") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		files = append(files, file{path, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("walked %d Go files: not the module root?", len(files))
	}

	// Pass 1: the declared reasons.
	declared := map[string]string{} // value -> where
	for _, fl := range files {
		for _, decl := range fl.f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					if filepath.Base(fl.path) != "reasons.go" {
						t.Errorf("%s: %s declared outside the package's reasons.go", fset.Position(name.Pos()), name.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					declared[v] = fset.Position(name.Pos()).String()
				}
			}
		}
	}
	if len(declared) < 20 {
		t.Fatalf("found %d declared reasons; the walk is broken", len(declared))
	}

	isReasonLit := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		v, _ := strconv.Unquote(lit.Value)
		_, ok = declared[v]
		return v, ok
	}
	mentionsReason := func(e ast.Node) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				found = found || strings.Contains(strings.ToLower(n.Name), "reason")
			case *ast.BasicLit:
				found = found || strings.Contains(strings.ToLower(n.Value), "reason")
			}
			return !found
		})
		return found
	}

	// Pass 2: the uses.
	for _, fl := range files {
		ast.Inspect(fl.f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				arg := -1
				switch fn := n.Fun.(type) {
				case *ast.SelectorExpr:
					if x, ok := fn.X.(*ast.Ident); ok && x.Name == "rpcstatus" {
						switch fn.Sel.Name {
						case "New":
							arg = 1
						case "Overload":
							arg = 0
						}
					}
				case *ast.Ident:
					if reasonHelpers[fn.Name] {
						arg = 0
					}
				}
				if arg >= 0 && arg < len(n.Args) {
					if lit, ok := n.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						t.Errorf("%s: reason %s is a literal; declare it in the package's reasons.go", fset.Position(lit.Pos()), lit.Value)
					}
				}
			case *ast.BinaryExpr:
				if n.Op != token.EQL && n.Op != token.NEQ {
					return true
				}
				for _, side := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
					if v, ok := isReasonLit(side[0]); ok && mentionsReason(side[1]) {
						t.Errorf("%s: compares a reason with the literal %q; use the constant declared at %s", fset.Position(n.Pos()), v, declared[v])
					}
				}
			case *ast.SwitchStmt:
				if n.Tag == nil || !mentionsReason(n.Tag) {
					return true
				}
				for _, st := range n.Body.List {
					for _, e := range st.(*ast.CaseClause).List {
						if v, ok := isReasonLit(e); ok {
							t.Errorf("%s: case %q on a reason; use the constant declared at %s", fset.Position(e.Pos()), v, declared[v])
						}
					}
				}
			case *ast.KeyValueExpr:
				if v, ok := isReasonLit(n.Value); ok && mentionsReason(n.Key) {
					t.Errorf("%s: reason field set to the literal %q; use the constant declared at %s", fset.Position(n.Pos()), v, declared[v])
				}
			}
			return true
		})
	}
}
