module github.com/cpuwork/cpuwork

go 1.25.0

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.47.0
)
