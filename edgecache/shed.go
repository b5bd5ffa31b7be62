package edgecache

import (
	"fmt"

	"willow/flex"
	"willow/shedding"
)

// admit takes the admission decision for a download by user of business
// (default flex.DefaultBusiness): the node's shedding policy when it has one
// (coarse shed_ratio plus priority admission), else the coarse shed_ratio
// knob alone, over the same users (node.UserHash). A rejection wraps ErrShed (shed_ratio) or ErrOverload.
func (s *Server) admit(business, user string) error {
	if business == "" {
		business = flex.DefaultBusiness
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
	if !s.node.UserHash().InRatio(user, s.now(), k.ShedRatio[business]) {
		return nil
	}
	s.m.shed.WithLabelValues(business).Inc()
	return fmt.Errorf("%w: shed_ratio[%s]=%g", ErrShed, business, k.ShedRatio[business])
}
