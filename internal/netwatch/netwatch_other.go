//go:build !linux

package netwatch

import "sync/atomic"

// Outside Linux nothing is watched: WatchListener returns its listener.

var netEpoll atomic.Int32

func init() { netEpoll.Store(-1) }

func watchConn(c any) bool { return false }

func arrived() bool { return false }

func Park() {}
