/* Never builds: //ps/net/tcp is not visible to ps/app (see BUILD). */
int ps__visibility_violation(void);
int ps__visibility_violation(void)
{
    return 0;
}
