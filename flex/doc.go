// Package flex is Willow's flex state: the knobs of DESIGN.md section 3, the
// named levels (normal, blue, yellow, red) that set them, validation of
// every change, and the typed view a node reads (Effective).
package flex
