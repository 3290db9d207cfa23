package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

// onnxPackages are the pinned Python packages the inference scenario
// needs: ONNX Runtime (its shared library) and onnx (its test models).
var onnxPackages = []string{"onnxruntime==1.30.0", "onnx==1.23.1"}

// setupONNX makes the inference scenario runnable on a fresh machine:
// when neither $CPUWORK_PYTHON nor python3 can import onnxruntime and
// onnx, it installs onnxPackages from PyPI into a venv in the user's
// cache directory (cpuwork/onnx-venv, kept for later runs), saying so on
// log, and points $CPUWORK_PYTHON at it. It returns why it did not, for
// the scenario's skip reason to stand; nil when ONNX Runtime is ready.
func setupONNX(log io.Writer) error {
	if _, _, err := workload.ONNXPaths(); err == nil {
		return nil
	}
	if os.Getenv("CPUWORK_PYTHON") != "" {
		return fmt.Errorf("$CPUWORK_PYTHON is set and cannot import onnxruntime and onnx: left as it is")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return err
	}
	venv := filepath.Join(cache, "cpuwork", "onnx-venv")
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err == nil {
		os.Setenv("CPUWORK_PYTHON", py)
		if _, _, err := workload.ONNXPaths(); err == nil {
			return nil
		}
	}
	fmt.Fprintf(log, "setting up the inference scenario: installing %v from PyPI into %s (once; --no-setup skips it)\n", onnxPackages, venv)
	if err := os.MkdirAll(filepath.Dir(venv), 0o755); err != nil {
		return err
	}
	steps := [][]string{{"python3", "-m", "venv", venv}, append([]string{filepath.Join(venv, "bin", "pip"), "install", "-q"}, onnxPackages...)}
	for _, st := range steps {
		c := exec.Command(st[0], st[1:]...)
		c.Stdout, c.Stderr = log, log
		if err := c.Run(); err != nil {
			os.RemoveAll(venv)
			return fmt.Errorf("%v: %w", st, err)
		}
	}
	os.Setenv("CPUWORK_PYTHON", py)
	_, _, err = workload.ONNXPaths()
	return err
}
