package edgecache

import (
	"fmt"

	"willow/edgecache/ring"
	"willow/shedding"
)

// admit takes the admission decision for a download by user of business
// (default DefaultBusiness): the node's shedding policy when it has one
// (coarse shed_ratio plus priority admission), else the coarse shed_ratio
// knob alone. A rejection wraps ErrShed (shed_ratio) or ErrOverload.
func (s *Server) admit(business, user string) error {
	if business == "" {
		business = DefaultBusiness
	}
	if sh := s.node.Shedder(); sh != nil {
		reason, ok := sh.Admit(business, user)
		if ok {
			return nil
		}
		s.m.shed.WithLabelValues(business).Inc()
		if reason == shedding.ReasonShedRatio {
			return fmt.Errorf("%w: business %s", ErrShed, business)
		}
		return fmt.Errorf("%w: %s", ErrOverload, reason)
	}
	k := s.node.Knobs()
	if !Shed(k.ShedRatio[business], user) {
		return nil
	}
	s.m.shed.WithLabelValues(business).Inc()
	return fmt.Errorf("%w: shed_ratio[%s]=%g", ErrShed, business, k.ShedRatio[business])
}

// Shed reports whether a download by user is rejected under ratio: the
// same user always gets the same answer for one ratio, and a user shed at
// a ratio is shed at every higher one.
func Shed(ratio float64, user string) bool {
	switch {
	case ratio <= 0:
		return false
	case ratio >= 1:
		return true
	}
	u := float64(ring.DefaultHash([]byte("shed\x00"+user))>>11) / (1 << 53)
	return u < ratio
}
