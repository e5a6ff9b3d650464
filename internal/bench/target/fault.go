package target

import (
	"errors"
	"fmt"
)

// Faulty is a target that can take the study's zone loss, for the contrast
// benchmark: Kill takes down with SIGKILL what losing one zone takes down
// in that system's two-zone layout, Revive starts it again on its data.
type Faulty interface {
	Target
	// Fault describes what Kill does ("kill 1 of 2 members").
	Fault() string
	// Kill returns once everything it killed is reaped.
	Kill()
	// Revive restarts what Kill killed and returns without waiting for it
	// to serve (the caller measures that).
	Revive() error
}

// killedMembers is how many of etcd's members one zone's loss takes: with
// one member, it; with two (one per zone), one; with three (two zones
// plus a witness, laid out 2+1), the two-member zone's two.
func (e *etcd) killedMembers() int { return e.members - e.members/2 }

func (e *etcd) Fault() string {
	n := e.killedMembers()
	if e.members == 3 {
		return "kill the 2-member zone of a 2+1 layout (2 of 3 members)"
	}
	return fmt.Sprintf("kill %d of %d member(s)", n, e.members)
}

func (e *etcd) Kill() {
	for _, p := range e.g.procs[:e.killedMembers()] {
		p.KillGroup()
	}
}

func (e *etcd) Revive() error {
	var errs []error
	for _, p := range e.g.procs[:e.killedMembers()] {
		if _, err := e.g.restart(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (k *kine) Fault() string {
	if k.pg {
		return "kill PostgreSQL (kine keeps running)"
	}
	return "kill kine (SQLite is inside it)"
}

// Kill kills the database under kine (for SQLite, kine itself).
func (k *kine) Kill() {
	if k.pg {
		k.db.srv.KillGroup()
		return
	}
	k.g.procs[0].KillGroup()
}

// Revive restarts PostgreSQL (kine too, if it gave up without its
// database), or kine over SQLite.
func (k *kine) Revive() error {
	var errs []error
	for _, p := range k.g.procs {
		select {
		case <-p.Exited():
		default:
			continue
		}
		n, err := k.g.restart(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k.db != nil && p == k.db.srv {
			k.db.srv = n
		}
	}
	return errors.Join(errs...)
}
