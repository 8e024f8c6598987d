/* The shared-library half of the uprobe fixture (ufix.c): one noinline function. */
__attribute__((noinline)) unsigned long lib_work(unsigned long x)
{
    return (x * 7) % 13;
}
