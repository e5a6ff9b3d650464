package dds

/*
#include <dds/dds.h>
*/
import "C"

import (
	"errors"
	"fmt"
)

// ErrTimeout is returned (wrapped in *Error) when dds_write blocked for the
// writer's MaxBlockingTime because its history cache was at the high-water
// mark. The sample was NOT written; the caller must retry or fail the
// request. It is never silently dropped.
var ErrTimeout = errors.New("dds: timeout")

// ErrClosed is returned by operations on a closed Participant, Writer or
// Reader.
var ErrClosed = errors.New("dds: closed")

// DDS return codes (dds/ddsrt/retcode.h); Cyclone returns them negated.
const (
	rcOK                 = 0
	rcPreconditionNotMet = 4
	rcTimeout            = 10
)

// Error is a failed Cyclone call.
type Error struct {
	Op   string // the C function, e.g. "dds_write"
	Code int    // positive DDS_RETCODE_* value
}

func (e *Error) Error() string {
	return fmt.Sprintf("dds: %s: %s (%d)", e.Op, C.GoString(C.dds_strretcode(C.dds_return_t(-e.Code))), e.Code)
}

// Is makes errors.Is(err, ErrTimeout) true for DDS_RETCODE_TIMEOUT.
func (e *Error) Is(target error) bool { return target == ErrTimeout && e.Code == rcTimeout }

func ddsErr(op string, rc C.dds_return_t) error {
	if rc >= 0 {
		return nil
	}
	return &Error{Op: op, Code: int(-rc)}
}
