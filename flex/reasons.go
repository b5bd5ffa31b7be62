package flex

// Reasons of a refused flex change or business (INVALID_ARGUMENT), one per
// validation sentinel of this package; the master sends them for a flex
// change, the upload front ReasonUnknownBusiness for an upload.
const (
	// ReasonUnknownKnob: ErrUnknownKnob.
	ReasonUnknownKnob = "unknown_knob"
	// ReasonUnknownBusiness: ErrUnknownBusiness.
	ReasonUnknownBusiness = "unknown_business"
	// ReasonInvalidKnob: ErrOutOfRange, a knob value outside its range.
	ReasonInvalidKnob = "invalid_knob"
	// ReasonUnknownLevel: ErrUnknownLevel.
	ReasonUnknownLevel = "unknown_level"
	// ReasonInvalidScope: ErrBadScope.
	ReasonInvalidScope = "invalid_scope"
)
