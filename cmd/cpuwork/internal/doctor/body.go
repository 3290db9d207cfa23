package doctor

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// What the doctor reads from a target's --url is bounded: a target the
// doctor diagnoses (as root, often) must not be able to exhaust its
// memory with a large or highly compressed body.
const (
	// maxDebugBody bounds /debug/cpuwork's JSON.
	maxDebugBody = 4 << 20
	// maxProfileBody bounds a CPU profile as sent (gzip-compressed, as
	// net/http/pprof sends it), maxProfileData the profile decompressed.
	maxProfileBody = 16 << 20
	maxProfileData = 64 << 20
	// maxTraceBody bounds an execution trace; it is read as a stream.
	maxTraceBody = 256 << 20
)

// tooLargeError says a body passed its cap.
type tooLargeError struct {
	what  string
	limit int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("too large: %s larger than %d MiB, not read", e.what, e.limit>>20)
}

// capReader reads r until limit bytes, then fails with a tooLargeError
// instead of ending quietly (a truncated body would be reported as a
// malformed one).
type capReader struct {
	r     io.Reader
	left  int64
	limit int64
	what  string
}

func capped(r io.Reader, limit int64, what string) io.Reader {
	return &capReader{r: r, left: limit, limit: limit, what: what}
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the cap from a larger one.
		var b [1]byte
		if n, _ := io.ReadFull(c.r, b[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, &tooLargeError{c.what, c.limit}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// readProfileData reads a CPU profile's body, decompressing it when it is
// gzip-compressed, within maxProfileBody as sent and maxProfileData
// decompressed.
func readProfileData(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(capped(r, maxProfileBody, "the profile"))
	if err != nil {
		return nil, err
	}
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		if len(raw) > maxProfileData {
			return nil, &tooLargeError{"the decompressed profile", maxProfileData}
		}
		return raw, nil
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(capped(gz, maxProfileData, "the decompressed profile"))
}

// statusError is a source's answer other than 200 OK.
type statusError struct {
	url, status string
	code        int
	retryAfter  bool   // a Retry-After header came with it
	hint        string // what serves the source
}

func (e *statusError) Error() string {
	if e.code == http.StatusServiceUnavailable && e.retryAfter {
		return fmt.Sprintf("%s: %s with Retry-After: shed by the target's admission (serve /debug/ outside its admission middleware: docs/guide.md)", e.url, e.status)
	}
	return fmt.Sprintf("%s: %s (%s)", e.url, e.status, e.hint)
}

func newStatusError(u string, resp *http.Response, hint string) *statusError {
	return &statusError{url: u, status: resp.Status, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != "", hint: hint}
}

// notServed reports whether err is a 404: the target does not serve the
// source at all (a program without net/http/pprof, or without a cpuwork
// executor), which is not a failure to read it.
func notServed(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusNotFound
}
