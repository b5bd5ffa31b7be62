package upload

import (
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
)

// scanStaging indexes the staged uploads by upload ID.
func (s *Server) scanStaging() error {
	ents, err := os.ReadDir(s.upDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m, err := readStageMeta(filepath.Join(s.upDir, e.Name()))
		if err != nil {
			// Begin crashed before its metadata was durable: nothing was
			// acknowledged for it.
			_ = os.RemoveAll(filepath.Join(s.upDir, e.Name()))
			continue
		}
		s.indexLocked(m.UploadID, e.Name())
		s.scanReserve(filepath.Join(s.upDir, e.Name()), e.Name(), m.Size)
	}
	return nil
}

func (s *Server) indexLocked(uploadID, key string) {
	if s.byID[uploadID] == nil {
		s.byID[uploadID] = map[string]bool{}
	}
	s.byID[uploadID][key] = true
}

func (s *Server) lock(key string) func() {
	h := fnv.New32a()
	h.Write([]byte(key))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// staged returns the staged upload of key, from memory or disk, or nil.
func (s *Server) staged(key string) (*staged, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.uploads[key]; ok {
		return st, nil
	}
	dir := filepath.Join(s.upDir, key)
	if _, err := os.Stat(filepath.Join(dir, fileMeta)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	st, err := openStaged(dir)
	if err != nil {
		return nil, err
	}
	s.uploads[key] = st
	s.indexLocked(st.meta.UploadID, key)
	return st, nil
}
