package flashbwd

import (
	"errors"
	"fmt"
)

// Status is a flashbwd status code (FLASHBWD_OK or FLASHBWD_ERR_* in flashbwd.h). It
// implements error like syscall.Errno, so errors.Is(err, flashbwd.StatusInvalidValue) tests
// the status of an *Error.
type Status int32

// Status codes, equal to the header's values (checked by TestStatusValuesMatchHeader).
const (
	StatusOK                Status = 0
	StatusNullArgument      Status = 1
	StatusStructSize        Status = 2
	StatusInvalidValue      Status = 3
	StatusNotSupported      Status = 4
	StatusNoDevice          Status = 5
	StatusWrongDevice       Status = 6
	StatusMisaligned        Status = 7
	StatusTensorNotSet      Status = 8
	StatusWorkspaceTooSmall Status = 9
	StatusCUDA              Status = 10
	StatusOutOfMemory       Status = 11
	StatusOverflow          Status = 12
	StatusBusy              Status = 13
	StatusOverlap           Status = 14
	StatusInvalidLengths    Status = 15
	StatusInternal          Status = 16
)

// Name is the status's stable identifier, e.g. "FLASHBWD_ERR_INVALID_VALUE"
// (flashbwd_status_name); unknown values give "FLASHBWD_ERR_UNKNOWN".
func (s Status) Name() string { return cStatusName(int32(s)) }

// Description is the library's one-line English text for the status (flashbwd_status_string).
func (s Status) Description() string { return cStatusString(int32(s)) }

// String is the status's name.
func (s Status) String() string { return s.Name() }

// Error makes a Status usable as an errors.Is target.
func (s Status) Error() string { return s.Name() + " (" + s.Description() + ")" }

// Error is a failed flashbwd call: which operation, its status, and the library's detailed
// message (which names the offending field and value). The message is read inside the same
// cgo call as the failing function, so it is the failure's own message even though
// goroutines move between OS threads.
type Error struct {
	Op      string // the C function or Go method that failed, e.g. "flashbwd_plan_create"
	Status  Status // never StatusOK
	Message string // the library's message, e.g. "FLASHBWD_ERR_INVALID_VALUE: problem.head_dim = 7; ..."
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Status.Error()
	}
	return "flashbwd: " + e.Op + ": " + msg
}

// Unwrap returns the Status, so errors.Is(err, StatusX) works.
func (e *Error) Unwrap() error { return e.Status }

// ErrClosed is returned by every method of a Plan after Close.
var ErrClosed = errors.New("flashbwd: the plan is closed")

// newError builds an *Error from a raw status and message; nil when status is OK.
func newError(op string, status int32, message string) error {
	if status == 0 {
		return nil
	}
	return &Error{Op: op, Status: Status(status), Message: message}
}

// invalid is an error detected on the Go side, reported like the library's own: status
// INVALID_VALUE and a message naming the field and its value.
func invalid(op, format string, args ...any) error {
	return &Error{Op: op, Status: StatusInvalidValue,
		Message: StatusInvalidValue.Name() + ": " + fmt.Sprintf(format, args...)}
}
