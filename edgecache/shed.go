package edgecache

import (
	"fmt"

	"willow/edgecache/ring"
)

// admit applies the coarse shed_ratio knob of business (default
// DefaultBusiness) to a download by user; a rejection wraps ErrShed.
func (s *Server) admit(business, user string) error {
	if business == "" {
		business = DefaultBusiness
	}
	k := s.knobs.Load()
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
