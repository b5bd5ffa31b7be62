package master

// Following is closed once s follows other masters' flex changes: tests
// that change flex on another master wait for it.
func (s *Server) Following() <-chan struct{} { return s.following }
