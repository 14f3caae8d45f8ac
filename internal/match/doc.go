// Package match finds the processes of a runaway chain: those running an
// exact executable (its device and inode, not its name), and by default
// their descendants. It also holds the rules that refuse targets no
// operator should aim freeze at.
//
// A scan reads the exe link and /proc/PID/stat of each process and nothing
// else, or, once the stop order has attached the BPF gate, every process
// in one pass of the gate's task iterator (Scanner.UseTasks), with the
// same fields; /proc/PID/cmdline is read only for a process that already
// passed the executable filter, because reading it takes the target's
// memory-map lock and stalls under a fork bomb. Match never signals or
// moves anything.
package match
