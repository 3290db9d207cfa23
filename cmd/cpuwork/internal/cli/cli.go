// Package cli is what the cpuwork and cpuwork-bench commands share: the
// exit statuses, usage errors and the hidden exec-in stage that joins a
// cgroup before executing a command.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// ExitCode asks main to exit with a status after cleanup ran.
type ExitCode int

func (e ExitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// Execute runs root with args and returns its exit status, printing a
// failure's message on stderr. The contract (docs/guide.md, "Exit
// statuses"): 0 success; 2 a usage error in every subcommand — flags,
// arguments, values, cobra's own errors included; 1 a failure of the
// command; doctor's 3, 4 and 5 for what it found; and run, whose status is
// CMD's, exits 125 for every failure of its own (usage included), 126 and
// 127 when CMD cannot be run or found, as timeout(1), env(1) and nice(1)
// do.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	c, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var code ExitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(stderr, "cpuwork:", err)
	if c != nil && c.Name() == "run" {
		return 125
	}
	if IsUsage(err) {
		return 2
	}
	return 1
}

// IsUsage reports whether err is a usage error: one of ours (UsageError)
// or one of cobra's about flags, arguments and subcommands.
func IsUsage(err error) bool {
	var u usageErr
	if errors.As(err, &u) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "requires at least", "flag needs an argument", "invalid argument", "bad flag syntax"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// usageErr is a usage error: main prints it and exits with status 2.
type usageErr struct{ error }

func (u usageErr) Unwrap() error { return u.error }

// UsageError marks err as a usage error (exit status 2).
func UsageError(err error) error { return usageErr{err} }
