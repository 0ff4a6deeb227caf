from gate.entry import entry

entry()
