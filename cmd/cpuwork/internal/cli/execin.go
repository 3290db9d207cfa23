package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// ParentEnv tells the exec-in stage which process must be its parent.
const ParentEnv = "CPUWORK_RUN_PARENT"

// cgroupMagics are the statfs magic numbers of cgroup v1 and v2
// filesystems (CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC in
// include/uapi/linux/magic.h).
var cgroupMagics = []int64{unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC}

// LockForExec locks the calling goroutine to its thread for good (it goes
// on to execve), gives that thread the parent-death signal SIGKILL and
// checks that the parent is still parent. The kernel keeps the signal per
// thread and clears it in every thread a process creates
// (kernel/fork.c, copy_process), so the Pdeathsig cpuwork set when it
// forked this process holds only on its first thread, and the goroutine
// may have migrated off it: without this, CMD could outlive a SIGKILLed
// cpuwork. The check after prctl closes the race with a parent that died
// before it.
func LockForExec(parent int) error {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if os.Getppid() != parent {
		return fmt.Errorf("cpuwork (pid %d) is gone", parent)
	}
	return nil
}

// checkProcsFD accepts descriptor fd only if it is open on a cgroup
// filesystem (statfs magic) and names a group's membership file,
// cgroup.procs or tasks (the name read through /proc/self/fd): the PID
// written to it must join a group, never set a limit (cpu.shares,
// memory.limit_in_bytes) or anything else.
func checkProcsFD(fd int) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if !slices.Contains(cgroupMagics, int64(st.Type)) {
		return fmt.Errorf("descriptor %d is not a cgroup file (filesystem magic %#x); refusing to write to it", fd, st.Type)
	}
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if b := filepath.Base(target); b != "cgroup.procs" && b != "tasks" {
		return fmt.Errorf("descriptor %d is %s, not a cgroup.procs or tasks file; refusing to write to it", fd, target)
	}
	return nil
}

// ExecInCmd is the hidden first stage of `run`: it joins the cgroups whose
// cgroup.procs files cpuwork passed it as open descriptors 3..3+N-1
// (refusing any descriptor that is not on a cgroup filesystem), checks that
// cpuwork is still its parent, then replaces itself with CMD. Exit status
// 127: CMD not found; 126: CMD not executable.
func ExecInCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "exec-in N -- CMD [ARGS...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 3 || args[1] != "--" {
				return errors.New("usage: exec-in N -- CMD [ARGS...]")
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 || n > 16 {
				return fmt.Errorf("exec-in: %q is not a number of descriptors (1..16)", args[0])
			}
			want := os.Getppid()
			if w := os.Getenv(ParentEnv); w != "" {
				if want, err = strconv.Atoi(w); err != nil {
					return fmt.Errorf("exec-in: %s=%q is not a PID", ParentEnv, w)
				}
			}
			if err := LockForExec(want); err != nil {
				return fmt.Errorf("exec-in: %w; not starting %s", err, args[2])
			}
			// Every descriptor is checked before any is written: a count
			// that does not match, or one descriptor that is not a
			// cgroup's membership file, joins nothing.
			for fd := 3; fd < 3+n; fd++ {
				if err := checkProcsFD(fd); err != nil {
					return fmt.Errorf("exec-in: %w; joined nothing", err)
				}
			}
			for fd := 3; fd < 3+n; fd++ {
				if _, err := unix.Write(fd, []byte(strconv.Itoa(os.Getpid()))); err != nil {
					return fmt.Errorf("exec-in: join cgroup (descriptor %d): %w", fd, err)
				}
				unix.Close(fd)
			}
			// The supervisor's PID was for this stage only.
			os.Unsetenv(ParentEnv)
			argv := args[2:]
			path, err := exec.LookPath(argv[0])
			if err != nil {
				fmt.Fprintln(os.Stderr, "cpuwork run:", err)
				if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
					return ExitCode(127)
				}
				return ExitCode(126)
			}
			err = syscall.Exec(path, argv, os.Environ())
			fmt.Fprintf(os.Stderr, "cpuwork run: exec %s: %v\n", path, err)
			if errors.Is(err, fs.ErrNotExist) {
				return ExitCode(127)
			}
			return ExitCode(126)
		},
	}
}
