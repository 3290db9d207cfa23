package main

import (
	"os/signal"
	"time"

	"errors"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// benchProgram is the bench's own program, which `cpuwork bench` runs
// with its arguments.
const benchProgram = "cpuwork-bench"

// benchPackage is benchProgram's package, built with `go run` when
// cpuwork runs from the source tree.
const benchPackage = "github.com/cpuwork/cpuwork/cmd/cpuwork/cpuwork-bench"

// benchCmd is `cpuwork bench`: it runs the bench program (benchCommand
// says which) with every argument passed through, so that --help, the
// exit status and signals are the bench's own.
func benchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure cpuwork against the best alternative on real work: better, equivalent or worse",
		Long: `Run cpuwork's benchmark scenarios on this machine (cpuwork bench --help
lists its flags). The bench is a program of its own, cpuwork-bench: its
workloads need cgo, ONNX Runtime, a load generator and a plotting library
that run, doctor, simulate and budget do not. cpuwork bench runs
cpuwork-bench from beside the cpuwork executable or from PATH; run from
the source tree (go run ./cmd/cpuwork bench), it builds it from there.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, _ := os.Executable()
			argv, build, err := benchCommand(exe, args, exec.LookPath)
			if err != nil {
				return err
			}
			if build == nil {
				err = syscall.Exec(argv[0], argv, os.Environ())
				return fmt.Errorf("bench: run %s: %w", argv[0], err)
			}
			return buildAndRunBench(build, args)
		},
	}
}

// benchCommand is how to run the bench with args, for a cpuwork
// executable at exe. Under `go run` (exe in a go-build directory of the
// temporary directory) it is build, the go command that builds
// benchPackage from the same source tree (its output path is left to
// buildAndRunBench); otherwise argv runs benchProgram beside exe, or
// else on PATH. It says how to install the bench when there is none.
func benchCommand(exe string, args []string, lookPath func(string) (string, error)) (argv, build []string, err error) {
	if builtByGoRun(exe) {
		if goCmd, err := lookPath("go"); err == nil {
			return nil, []string{goCmd, "build", "-o"}, nil
		}
	}
	if exe != "" {
		beside := filepath.Join(filepath.Dir(exe), benchProgram)
		if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return append([]string{beside}, args...), nil, nil
		}
	}
	if p, err := lookPath(benchProgram); err == nil {
		return append([]string{p}, args...), nil, nil
	} else if !errors.Is(err, exec.ErrNotFound) {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return nil, nil, fmt.Errorf("bench: %s is not installed beside %s or on PATH; install it with `go install %s@latest` (it needs cgo: gcc), or run `go run ./cmd/cpuwork bench` in a clone of the repository", benchProgram, filepath.Base(exe), benchPackage)
}

// buildAndRunBench builds the bench with build (the go command's
// "build -o") into a directory of its own, runs it with args as a child
// that SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to cpuwork are passed
// on to, returns its exit status (128 + the signal that ended it) and
// removes the directory. The first build on empty caches downloads and
// compiles the bench's workloads: it says so after a few seconds.
func buildAndRunBench(build, args []string) error {
	dir, err := os.MkdirTemp("", "cpuwork-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	// Signals are caught from the start: one during the build stops it
	// (and the directory is still removed), one during the bench is
	// passed on to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	bin := filepath.Join(dir, benchProgram)
	b := exec.Command(build[0], append(build[1:], bin, benchPackage)...)
	b.Stdout, b.Stderr = os.Stderr, os.Stderr
	slow := time.AfterFunc(3*time.Second, func() {
		fmt.Fprintf(os.Stderr, "cpuwork bench: building %s (on empty caches its first build downloads and compiles its workloads: minutes)\n", benchProgram)
	})
	if code, err := runForwarding(b, sigs); err != nil || code != 0 {
		slow.Stop()
		if err == nil && code < 128 {
			err = fmt.Errorf("bench: build %s: exit status %d", benchPackage, code)
		}
		if err != nil {
			return err
		}
		return cli.ExitCode(code)
	}
	slow.Stop()
	child := exec.Command(bin, args...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	code, err := runForwarding(child, sigs)
	if err != nil {
		return err
	}
	if code != 0 {
		return cli.ExitCode(code)
	}
	return nil
}

// runForwarding runs cmd, passing it every signal that arrives on sigs
// while it runs, and returns its exit status (128 + the signal that
// ended it).
func runForwarding(cmd *exec.Cmd, sigs <-chan os.Signal) (int, error) {
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	return 0, nil
}

// builtByGoRun reports whether exe is a binary `go run` built: it lies
// in a go-build directory under the temporary directory (GOTMPDIR or
// os.TempDir), or in the build cache, where `go run` keeps the binaries
// it built before (GOCACHE, by default go-build in the user's cache
// directory).
func builtByGoRun(exe string) bool {
	if exe == "" {
		return false
	}
	under := func(dir string) bool {
		rel, err := filepath.Rel(dir, exe)
		return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
	}
	for _, tmp := range []string{os.Getenv("GOTMPDIR"), os.TempDir()} {
		if tmp == "" {
			continue
		}
		if rel, err := filepath.Rel(tmp, exe); err == nil && strings.HasPrefix(rel, "go-build") {
			return true
		}
	}
	cache := os.Getenv("GOCACHE")
	if cache == "" {
		if d, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(d, "go-build")
		}
	}
	return cache != "" && cache != "off" && under(cache)
}
