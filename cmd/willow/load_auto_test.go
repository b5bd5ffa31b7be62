package main

import (
	"reflect"
	"testing"

	"willow/loadgen"
)

// TestUnscriptedProfileIsScriptedWithoutActions: the rehearsal profile has
// the scripted one's phases exactly, and no level actions.
func TestUnscriptedProfileIsScriptedWithoutActions(t *testing.T) {
	un, err := loadgen.LoadProfile("../../profiles/spring-festival-unscripted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scriptedProfile("../../profiles/spring-festival-unscripted.yaml", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(un.Actions) != 0 || len(sc.Actions) == 0 {
		t.Fatalf("actions: unscripted %d, scripted %d", len(un.Actions), len(sc.Actions))
	}
	if !reflect.DeepEqual(un.Phases, sc.Phases) {
		t.Fatalf("phases differ:\n%+v\n%+v", un.Phases, sc.Phases)
	}
	if _, err := scriptedProfile("../../profiles/steady.yaml", "", 1); err == nil {
		t.Fatal("no -unscripted in the name and no --scripted: want a usage error")
	}
}
