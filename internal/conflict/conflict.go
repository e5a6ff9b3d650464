package conflict

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/fsutil"
)

// FormatVersion is the version of the Set file format.
const FormatVersion = 1

// Set is the conflict record of one split brain, as the losing node saw it.
type Set struct {
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	// Member is the losing node's member ID (hex); Winner the epoch
	// (term/member) of the history that prevailed.
	Member string `json:"member"`
	Winner string `json:"winner"`
	// DivergedAt is the last log index both histories share; the entries
	// after it on the loser are the diverged ones.
	DivergedAt uint64 `json:"divergedAt"`
	// BaseRevision is the revision at DivergedAt; LoserRevision the
	// loser's newest revision when it gave up its history.
	BaseRevision  int64 `json:"baseRevision"`
	LoserRevision int64 `json:"loserRevision"`
	// Incomplete says what could not be recovered exactly (log trimmed,
	// history compacted), and where to look instead. Empty when complete.
	Incomplete string `json:"incomplete,omitempty"`
	// Keys is the final state, on the loser, of every key the diverged
	// writes changed, in key order.
	Keys []Key `json:"keys"`
	// Entries are the diverged log entries, in order.
	Entries []Entry `json:"entries"`
	// SHA256 is the hex SHA-256 of the set's JSON encoding (as Save
	// writes it) with this field empty. Load refuses a set whose bytes no
	// longer match: a record that a disk corrupted must not be re-applied
	// as if it were the loser's writes. Sets written before it existed
	// have none and load unchecked.
	SHA256 string `json:"sha256,omitempty"`
}

// encode is the file form of s, with its checksum.
func encode(s Set) ([]byte, error) {
	s.SHA256 = ""
	b, err := json.MarshalIndent(&s, "", " ")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	s.SHA256 = hex.EncodeToString(sum[:])
	return json.MarshalIndent(&s, "", " ")
}

// Key is the loser's final state of one key.
type Key struct {
	Key         []byte `json:"key"`
	Value       []byte `json:"value,omitempty"`
	Deleted     bool   `json:"deleted,omitempty"`
	ModRevision int64  `json:"modRevision"`
	// Lease is the lease the key was attached to on the loser; that lease
	// is gone with the loser's history, so a re-applied key gets none.
	Lease int64 `json:"lease,omitempty"`
}

// Entry is one diverged log entry.
type Entry struct {
	Index    uint64    `json:"index"`
	Epoch    string    `json:"epoch"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision"`
	// Summary is a one-line description of the request; Request the
	// marshalled etcdserverpb.InternalRaftRequest.
	Summary string `json:"summary"`
	Request []byte `json:"request,omitempty"`
}

// ErrCorrupt reports a conflict record whose bytes changed after Save.
var ErrCorrupt = errors.New("conflict record is corrupt")

// Dir is where a data dir keeps its conflict sets.
func Dir(dataDir string) string { return filepath.Join(dataDir, "conflicts") }

// Save writes s durably as dir/name unless that file exists already (the
// export is repeated after a crash); it returns the path.
func Save(dir, name string, s *Set) (string, error) {
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	// The directory may be new: its own entry must be durable too, or a
	// power loss takes the record with it.
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	b, err := encode(*s)
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := writeSync(tmp, b); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, fsutil.SyncDir(dir)
}

func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Load reads one set.
func Load(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Set
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Version != FormatVersion {
		return nil, fmt.Errorf("%s: conflict format version %d, this dyad reads %d", path, s.Version, FormatVersion)
	}
	if s.SHA256 != "" {
		want, err := encode(s)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(bytes.TrimSpace(b), bytes.TrimSpace(want)) {
			return nil, fmt.Errorf("%s: %w: the conflict record fails its SHA-256 check", path, ErrCorrupt)
		}
	}
	return &s, nil
}

// List returns the paths of the sets in dir, oldest first (names start
// with their creation time). A missing dir holds none.
func List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Resolution is what an operator did with one key of a set.
type Resolution struct {
	Key    []byte    `json:"key"`
	Action string    `json:"action"` // "applied" or "dismissed"
	At     time.Time `json:"at"`
	// Revision is the revision of the re-applied write (0 if dismissed).
	Revision int64 `json:"revision,omitempty"`
}

// Record appends r to the set's resolution log, durably.
func Record(setPath string, r Resolution) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	log := setPath + ".applied"
	_, statErr := os.Stat(log)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// A new log's name must be durable too, or a power loss forgets the
	// resolution while the key it re-applied stays in the store.
	return fsutil.CreateDurably(log, created)
}

// Resolved returns the newest resolution of each key of the set.
func Resolved(setPath string) (map[string]Resolution, error) {
	out := map[string]Resolution{}
	f, err := os.Open(setPath + ".applied")
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r Resolution
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A line torn by a crash is the last one; the key is
			// simply unresolved.
			continue
		}
		out[string(r.Key)] = r
	}
	return out, sc.Err()
}

// Accept marks the set as accepted: a node that --split-brain-policy
// manual holds back may give up its diverged history (kept in the set).
func Accept(setPath string) error {
	if err := writeSync(setPath+".accept", []byte(time.Now().UTC().Format(time.RFC3339)+"\n")); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(setPath))
}

// Accepted reports whether Accept was called on the set.
func Accepted(setPath string) bool {
	_, err := os.Stat(setPath + ".accept")
	return err == nil
}
