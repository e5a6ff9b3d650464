package server

// InjectStorageFault makes the node's storage commits fail while f returns
// an error (a disk that cannot persist); nil f removes the fault.
func InjectStorageFault(s *Server, f func() error) { s.be.InjectFault(f) }
