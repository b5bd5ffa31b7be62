// Package flex is Willow's flex state: the knobs of DESIGN.md section 3, the
// named levels (normal, blue, yellow, red) that set them, validation of
// every change, and the typed view a node reads (Effective).
//
// The level plans live in levels.yaml (embedded; a master may load another
// file with LoadPlans). Each level names a base and the knobs it changes,
// so the plans are graded; the normal level starts from Defaults, which is
// the one place the default image quality is kept (DefaultImageQuality).
//
// Guarantees:
//   - LoadPlans rejects a file whose plans name an unknown knob or business,
//     a value out of range, or an unknown or cyclic base; every plan it
//     returns is complete (every knob has a value) and valid.
//   - Plans.Validate names the knob and its allowed values in the error
//     (*KnobError wrapping ErrUnknownKnob, ErrUnknownBusiness or
//     ErrOutOfRange): ratios in [0,1], image_quality in [10,95],
//     video_bitrate_kbps between 300 and the normal level's value.
//   - A Setting (global level and overrides plus staged-rollout scopes)
//     renders to one FlexState; Revert undoes one change on a later
//     setting without touching what was changed since.
//   - Effective never fails: unparseable values keep the default.
//
// The master (package master) owns the versioned document built from
// these pieces; nodes only read it.
package flex
