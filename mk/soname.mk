# The SONAME file: a program linked against the build tree, and one linked
# against a DESTDIR install, must start (the loader finds libspclient.so.1).
# Run by check (tests/soname.sh).

.PHONY: check-soname
check-soname: $(LIBSO) $(LIBSO1)
	$(Q)echo "== SONAME: link and run against $(BUILD)/lib and a DESTDIR install =="
	$(Q)CC="$(CC)" MAKE="$(MAKE)" sh tests/soname.sh $(BUILD)

CHECK_EXTRA += check-soname
